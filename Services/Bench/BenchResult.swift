import Foundation

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

enum BenchReport {
    static func print(_ results: [BenchResult], settings: BenchSettings, json: Bool) {
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            for result in results {
                var object = (try? JSONSerialization.jsonObject(with: encoder.encode(result))) as? [String: Any] ?? [:]
                object["rate"] = result.value ?? result.rate.rounded()
                if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) {
                    Swift.print(String(decoding: data, as: UTF8.self))
                }
            }
            return
        }
        let rates = Dictionary(results.map { ($0.name, $0.rate) }, uniquingKeysWith: { a, _ in a })
        Swift.print("nh-bench: \(settings.size)-byte messages, tcp loopback, one run on this machine")
        Swift.print("")
        Swift.print(pad("figure", 44) + pad("rate", 16, right: true) + "  " + pad("vs baseline", 26) + "note")
        for result in results {
            var ratio = ""
            if let baseline = result.baseline, let base = rates[baseline], base > 0 {
                ratio = String(format: "%.2f× %@", result.rate / base, baseline)
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
    let elapsed = start.duration(to: .now)
    return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}
