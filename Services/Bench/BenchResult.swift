import Foundation
import ServiceKit

struct BenchSettings {
    var messages: Int
    var roundTrips: Int
    var size: Int
}

/// One measured figure. `baseline` names the figure it is compared with.
struct BenchResult: Encodable {
    var name: String
    var unit: String
    var count: Int
    var seconds: Double
    var baseline: String?
    /// A figure that is not a rate, such as a latency; printed instead of count / seconds.
    var value: Double?
    var note: String?

    init(name: String, unit: String, count: Int, seconds: Double, baseline: String? = nil, value: Double? = nil, note: String? = nil) {
        self.name = name
        self.unit = unit
        self.count = count
        self.seconds = seconds
        self.baseline = baseline
        self.value = value
        self.note = note
    }

    var rate: Double { value ?? (seconds > 0 ? Double(count) / seconds : 0) }
}

/// The machine a run was measured on, as `nh-bench --output` records it.
struct BenchMachine {
    var cores: Int
    var date: Date
    var host: String
    var os: String
    var memoryBytes: UInt64

    static var current: BenchMachine {
        let info = ProcessInfo.processInfo
        return BenchMachine(
            cores: info.activeProcessorCount, date: Date(), host: info.hostName, os: info.operatingSystemVersionString,
            memoryBytes: info.physicalMemory)
    }

    var object: [String: Any] {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        return ["cores": cores, "date": formatter.string(from: date), "host": host, "os": os, "memoryBytes": memoryBytes]
    }
}

enum BenchReport {
    /// One figure as a JSON object: its fields, with `rate` as printed (a value as measured, a rate
    /// rounded to a whole number).
    static func object(_ result: BenchResult) -> [String: Any] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var object = (try? JSONSerialization.jsonObject(with: encoder.encode(result))) as? [String: Any] ?? [:]
        object["rate"] = result.value ?? result.rate.rounded()
        return object
    }

    /// Each figure's rate by name, for the figures that name it as their baseline; the first of a name counts.
    static func rates(_ results: [BenchResult]) -> [String: Double] {
        Dictionary(results.map { ($0.name, $0.rate) }, uniquingKeysWith: { a, _ in a })
    }

    /// The figure's rate over its baseline's, when it has one and that was measured (above zero).
    static func ratio(_ result: BenchResult, rates: [String: Double]) -> Double? {
        guard let baseline = result.baseline, let base = rates[baseline], base > 0 else { return nil }
        return result.rate / base
    }

    /// The whole run as one JSON document: `machine` (cores, date, host, os, memory), `settings`,
    /// and `results`, each figure as `--json` prints it with its `ratio` to its baseline when there is one.
    static func document(_ results: [BenchResult], settings: BenchSettings, machine: BenchMachine, arguments: [String]) throws -> Data {
        let rates = rates(results)
        let figures = results.map { result -> [String: Any] in
            var object = object(result)
            if let ratio = ratio(result, rates: rates) { object["ratio"] = ratio }
            return object
        }
        let document: [String: Any] = [
            "machine": machine.object,
            "settings": ["messages": settings.messages, "roundTrips": settings.roundTrips, "size": settings.size, "arguments": arguments],
            "results": figures,
        ]
        return try JSONSerialization.data(withJSONObject: document, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
    }

    /// Writes `document` to `path`, replacing the file whole.
    static func write(_ results: [BenchResult], settings: BenchSettings, to path: String, arguments: [String]) throws {
        let data = try document(results, settings: settings, machine: .current, arguments: arguments)
        try (data + Data("\n".utf8)).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    static func print(_ results: [BenchResult], settings: BenchSettings, json: Bool) {
        if json {
            for result in results {
                if let data = try? JSONSerialization.data(withJSONObject: object(result), options: [.sortedKeys]) {
                    Swift.print(String(decoding: data, as: UTF8.self))
                }
            }
            return
        }
        let rates = rates(results)
        Swift.print("nh-bench: \(settings.size)-byte messages, tcp loopback, one run on this machine")
        Swift.print("")
        Swift.print(pad("figure", 44) + pad("rate", 16, right: true) + "  " + pad("vs baseline", 26) + "note")
        for result in results {
            var ratio = ""
            if let baseline = result.baseline, let value = Self.ratio(result, rates: rates) {
                ratio = String(format: "%.2f× %@", value, baseline)
            }
            Swift.print(
                pad(result.name, 44) + pad(format(result.rate, decimals: result.value == nil ? 0 : 2) + " " + result.unit, 16, right: true) + "  "
                    + pad(ratio, 26) + (result.note ?? ""))
        }
    }

    static func format(_ rate: Double, decimals: Int = 0) -> String {
        let formatter = NumberFormatter()
        formatter.numberStyle = .decimal
        formatter.maximumFractionDigits = decimals
        formatter.minimumFractionDigits = decimals
        return formatter.string(from: NSNumber(value: decimals == 0 ? rate.rounded() : rate)) ?? "\(rate)"
    }

    static func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
        let count = text.count
        guard count < width else { return text + " " }
        let fill = String(repeating: " ", count: width - count)
        return right ? fill + text : text + fill
    }
}

/// Runs `body` on a new thread and returns a way to wait for it.
func spawn(_ body: @escaping @Sendable () -> Void) -> DispatchSemaphore {
    let done = DispatchSemaphore(value: 0)
    Thread {
        body()
        done.signal()
    }.start()
    return done
}

func seconds(since start: ContinuousClock.Instant) -> Double {
    start.duration(to: .now).inSeconds
}

extension Array where Element == Double {
    /// The middle value once sorted, the mean of the two middle ones for an even count; nil when empty.
    var median: Double? {
        guard !isEmpty else { return nil }
        let sorted = sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }
}

/// One figure measured in rounds: each round's seconds, or what went wrong in it.
struct Rounds {
    var seconds: [Double] = []
    var problems: [String] = []

    mutating func add<Failure: Error>(_ round: Result<Double, Failure>, round number: Int) {
        switch round {
        case .success(let time): seconds.append(time)
        case .failure(let error): problems.append("round \(number): \(error)")
        }
    }

    /// The figure at the median round's time, every round's time in its note; when any round
    /// failed, no rate and what went wrong instead.
    func result(name: String, unit: String, count: Int, baseline: String? = nil, note: String) -> BenchResult {
        guard problems.isEmpty, let median = seconds.median else {
            return BenchResult(name: name, unit: unit, count: 0, seconds: 0, baseline: baseline, note: problems.joined(separator: "; "))
        }
        let times = seconds.map { String(format: "%.2f", $0) }.joined(separator: ", ")
        return BenchResult(
            name: name, unit: unit, count: count, seconds: median, baseline: baseline, note: "median of \(seconds.count) (\(times) s); \(note)")
    }
}
