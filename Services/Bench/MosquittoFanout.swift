import Foundation
import ServiceKit

#if canImport(Glibc)
import Glibc
#endif

/// The MQTT reference for fan-out: one 256-byte notification broadcast to N connected clients.
/// A Mosquitto broker listens on a free loopback port; N libmosquitto subscribers are spread over
/// `nh-bench mqtt-subscribers` processes of at most `clientsPerProcess` each, since every client
/// holds three descriptors (its socket and the library's wake-up socket pair); one libmosquitto
/// publisher runs in this process.
///
/// The broker keeps its defaults except what a benchmark needs: no persistence, anonymous access,
/// and `max_queued_messages` raised to the number of messages each client is sent, so the queue
/// limit never drops one. `max_inflight_messages` stays at its default of 20 per client, which a
/// run of `broadcasts` ≤ 20 never reaches and a longer run meets as a real subscriber would.
enum MosquittoFanout {
    static let clientsPerProcess = 2_500
    static let timeout: Duration = .seconds(120)
    static let topic = "nh-bench/fanout"
    /// Unacknowledged QoS 1 publishes the publisher allows itself when sending as fast as it can.
    static let publishWindow = 100

    static func deliveryName(n: Int, qos: Int) -> String { "Mosquitto fan-out QoS \(qos), \(BenchReport.format(Double(n))) subs" }
    static func connectName(n: Int, qos: Int) -> String { "Mosquitto connect+subscribe \(BenchReport.format(Double(n))), QoS \(qos)" }
    static func duplicatesName(n: Int, qos: Int) -> String { "Mosquitto duplicates QoS \(qos), \(BenchReport.format(Double(n))) subs" }
    static func latencyName(n: Int, percentile: String) -> String {
        "Mosquitto fan-out latency \(percentile), \(BenchReport.format(Double(n))) subs"
    }

    /// Broadcasts `broadcasts` messages at `qos` to `n` subscribers as fast as the broker takes them.
    /// Figures: deliveries per second reaching subscribers (n × broadcasts over the time from the
    /// first publish until every subscriber process has them all), the time to connect and
    /// subscribe all n, and the duplicates seen.
    static func run(n: Int, broadcasts: Int = 10, qos: Int = 1) -> [BenchResult] {
        measure(n: n, broadcasts: broadcasts, qos: qos).results
    }

    static func cpuName(n: Int, qos: Int) -> String { "Mosquitto broker CPU per QoS \(qos) delivery, \(BenchReport.format(Double(n))) subs" }

    /// One run's figures, and what the broker spent in CPU (user and system, all its threads)
    /// from the first publish until every subscriber had every message; nil CPU when the run did
    /// not finish.
    struct Run {
        var results: [BenchResult]
        var brokerCPUSeconds: Double?
        var deliveries: Int
    }

    /// The broker's CPU per delivery at `qos`, from `long` (a run of many broadcasts) and `short`
    /// (a run of few), as `ProcessCPU.microsecondsPerDelivery` takes the difference.
    static func cpuPerDelivery(n: Int, qos: Int, short: Run, long: Run) -> BenchResult {
        let name = cpuName(n: n, qos: qos)
        guard let shortCPU = short.brokerCPUSeconds, let longCPU = long.brokerCPUSeconds,
            let value = ProcessCPU.perDelivery(short: (shortCPU, short.deliveries), long: (longCPU, long.deliveries)).map({ $0 * 1e6 })
        else {
            return BenchResult(name: name, unit: "µs", count: 0, seconds: 0, note: "not measured: a run did not finish")
        }
        return BenchResult(
            name: name, unit: "µs", count: 0, seconds: 0, value: value,
            note: String(format: "broker user+system, %d − %d deliveries: %.2f − %.2f CPU s", long.deliveries, short.deliveries, longCPU, shortCPU))
    }

    static func measure(n: Int, broadcasts: Int, qos: Int) -> Run {
        let names = (deliveryName(n: n, qos: qos), connectName(n: n, qos: qos), duplicatesName(n: n, qos: qos))
        func unfinished(_ why: String) -> Run {
            Run(results: [BenchResult(name: names.0, unit: "deliveries/s", count: 0, seconds: 0, note: why)], brokerCPUSeconds: nil, deliveries: 0)
        }
        let session: Session
        do {
            session = try Session(subscribers: n, qos: qos, expect: broadcasts, timed: false)
        } catch {
            return unfinished("skipped: \(error)")
        }
        guard let connectSeconds = session.waitReady() else {
            session.stop()
            return unfinished("subscribers not ready in \(timeout): \(session.reports.summary)")
        }
        let publisher: MQTTFanoutPublisher
        do {
            publisher = try MQTTFanoutPublisher(port: session.port, qos: Int32(qos), inflight: publishWindow, timeout: .seconds(10))
        } catch {
            session.stop()
            return unfinished("\(error)")
        }
        let processes = session.processCount
        let cpuBefore = session.brokerCPUSeconds
        let outcome = publisher.run(
            topic: topic, count: broadcasts, window: publishWindow, rate: nil, deadline: .now + timeout,
            finished: { session.reports.doneCount >= processes })
        let finished = session.reports.doneCount >= processes
        let cpuAfter = session.brokerCPUSeconds
        let end = session.reports.lastDone ?? .now
        publisher.close()
        session.stop()

        let totals = session.reports.totals
        let expected = n * broadcasts
        let complete = finished && totals.distinct == expected
        let elapsed = seconds(from: outcome.start, to: end)
        var note = "\(broadcasts) × \(FanoutPayload.size) B, subscribers in \(processes) process\(processes == 1 ? "" : "es")"
        if qos > 0 { note += ", every delivery PUBACKed" }
        if !complete {
            note = "not finished in \(timeout): \(totals.distinct) of \(expected) delivered"
            if outcome.connectionLost { note += ", publisher lost its connection" }
        }
        var duplicateNote = "publisher got \(outcome.acknowledged) of \(outcome.published) acknowledged"
        if totals.lost > 0 { duplicateNote += "; \(totals.lost) subscriber connections broke" }
        let results = [
            BenchResult(name: names.0, unit: "deliveries/s", count: complete ? totals.distinct : 0, seconds: elapsed, note: note),
            BenchResult(
                name: names.1, unit: "s", count: n, seconds: connectSeconds, value: connectSeconds,
                note: "from starting the subscriber processes to the last SUBACK"),
            BenchResult(
                name: names.2, unit: "msgs", count: totals.duplicates, seconds: 0, value: Double(totals.duplicates), note: duplicateNote),
        ]
        var cpu: Double?
        if complete, let cpuBefore, let cpuAfter { cpu = cpuAfter - cpuBefore }
        return Run(results: results, brokerCPUSeconds: cpu, deliveries: complete ? totals.distinct : 0)
    }

    /// N subscribers at QoS 1 while the publisher sends `count` messages at `rate` per second, each
    /// stamped as it leaves. Figures in milliseconds: p50, p99 and p99.9 of send-to-receive time at
    /// one subscriber (the first of the first process), then of the time each message took to reach
    /// the last of all N.
    static func latency(n: Int, rate: Int = 1_000, count: Int = 5_000) -> [BenchResult] {
        let percentiles: [(label: String, fraction: Double)] = [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)]
        let names = percentiles.map { latencyName(n: n, percentile: $0.label) }
        func unfinished(_ why: String) -> [BenchResult] {
            names.map { BenchResult(name: $0, unit: "ms", count: 0, seconds: 0, note: why) }
        }
        let session: Session
        do {
            session = try Session(subscribers: n, qos: 1, expect: count, timed: true, solo: true)
        } catch {
            return unfinished("skipped: \(error)")
        }
        guard session.waitReady() != nil else {
            session.stop()
            return unfinished("subscribers not ready in \(timeout): \(session.reports.summary)")
        }
        // Sending on a schedule, not in step with acknowledgements, so a slow broker shows up as
        // latency instead of as a slower sender; the library's own cap is lifted accordingly.
        let publisher: MQTTFanoutPublisher
        do {
            publisher = try MQTTFanoutPublisher(port: session.port, qos: 1, inflight: 65_535, timeout: .seconds(10))
        } catch {
            session.stop()
            return unfinished("\(error)")
        }
        let processes = session.processCount
        let outcome = publisher.run(
            topic: topic, count: count, window: count, rate: rate, deadline: .now + timeout,
            finished: { session.reports.doneCount >= processes })
        let end = session.reports.lastDone ?? .now
        publisher.close()
        session.stop()

        let totals = session.reports.totals
        let one = session.reports.latencies.sorted()
        let offered = Double(rate)
        let sustained = Double(totals.distinct) / max(seconds(from: outcome.start, to: end), 1e-9)
        guard totals.distinct == count, one.count == count else {
            return unfinished(
                "not finished in \(timeout): \(BenchReport.format(Double(totals.distinct))) of \(BenchReport.format(Double(count))) "
                    + "delivered, \(BenchReport.format(sustained)) of \(BenchReport.format(offered)) deliveries/s offered")
        }
        let load =
            "\(BenchReport.format(Double(count))) × \(FanoutPayload.size) B at \(BenchReport.format(Double(rate)))/s, "
            + "\(BenchReport.format(offered)) deliveries/s offered"
        func figures(_ samples: [Int], names: ArraySlice<String>, note: String) -> [BenchResult] {
            zip(percentiles, names).map { percentile, name in
                let rank = min(samples.count - 1, max(0, Int((percentile.fraction * Double(samples.count)).rounded(.up)) - 1))
                return BenchResult(name: name, unit: "ms", count: samples.count, seconds: 0, value: Double(samples[rank]) / 1e6, note: note)
            }
        }
        return figures(one, names: names[0..<3], note: "QoS 1 to one of \(BenchReport.format(Double(n))) connected subscribers; " + load)
    }

    private static func seconds(from start: ContinuousClock.Instant, to end: ContinuousClock.Instant) -> Double {
        start.duration(to: end).inSeconds
    }

    /// How N subscribers are split over processes: as evenly as possible, none above the cap.
    struct SubscriberPlan {
        let counts: [Int]

        init(_ n: Int) {
            let processes = max(1, (n + MosquittoFanout.clientsPerProcess - 1) / MosquittoFanout.clientsPerProcess)
            counts = (0..<processes).map { n / processes + ($0 < n % processes ? 1 : 0) }
        }
    }

    /// What the subscriber processes said, collected by one reader thread per process.
    final class Reports: @unchecked Sendable {  // every field is read and written under `condition`
        struct Totals {
            var received = 0
            var distinct = 0
            var duplicates = 0
            var lost = 0
        }

        private let condition = NSCondition()
        private var ready = 0
        private var lastReadyAt: ContinuousClock.Instant?
        private var done: Set<Int> = []
        private var lastDoneAt: ContinuousClock.Instant?
        private var sums = Totals()
        private var timed: [Int] = []
        private var slowestByMessage: [Int] = []
        private var problems: [String] = []
        private var ended = 0

        func read(_ handle: FileHandle, process index: Int) {
            JSONLines.read(handle, line: { [self] object in take(object, process: index, at: .now) }) { [self] in
                condition.lock()
                ended += 1
                if !done.contains(index) { problems.append("subscriber process \(index) ended without a report") }
                condition.broadcast()
                condition.unlock()
            }
        }

        private func take(_ object: [String: Any], process index: Int, at instant: ContinuousClock.Instant) {
            guard let event = object["event"] as? String else { return }
            condition.lock()
            defer {
                condition.broadcast()
                condition.unlock()
            }
            switch event {
            case "ready":
                ready += 1
                lastReadyAt = instant
            case "done":
                guard done.insert(index).inserted else { return }
                sums.received += object["received"] as? Int ?? 0
                sums.distinct += object["distinct"] as? Int ?? 0
                sums.duplicates += object["duplicates"] as? Int ?? 0
                sums.lost += object["lost"] as? Int ?? 0
                if index == 0 { timed = object["latencies"] as? [Int] ?? [] }
                let slowest = object["slowest"] as? [Int] ?? []
                if slowestByMessage.isEmpty {
                    slowestByMessage = slowest
                } else if slowest.count == slowestByMessage.count {
                    // A message missing (-1) anywhere stays missing: it did not reach every client.
                    for (sequence, latency) in slowest.enumerated() where slowestByMessage[sequence] >= 0 {
                        slowestByMessage[sequence] = latency < 0 ? -1 : max(slowestByMessage[sequence], latency)
                    }
                }
                lastDoneAt = instant
            case "error":
                problems.append("subscriber process \(index): \(object["message"] as? String ?? "error")")
            default:
                break
            }
        }

        /// When the last of `count` processes said ready, or nil at the deadline or on a problem.
        func waitReady(count: Int, deadline: Date) -> ContinuousClock.Instant? {
            condition.lock()
            defer { condition.unlock() }
            while ready < count && problems.isEmpty {
                if !condition.wait(until: deadline) { return nil }
            }
            return ready >= count ? lastReadyAt : nil
        }

        /// Waits until `count` reader threads have seen their process's output end.
        func waitEnded(count: Int, deadline: Date) {
            condition.lock()
            defer { condition.unlock() }
            while ended < count {
                if !condition.wait(until: deadline) { return }
            }
        }

        var doneCount: Int { condition.withLock { done.count } }
        /// When the last process said done; a figure ends here, not when this process noticed.
        var lastDone: ContinuousClock.Instant? { condition.withLock { lastDoneAt } }
        var totals: Totals { condition.withLock { sums } }
        /// Send-to-receive nanoseconds at the timed subscriber, in arrival order.
        var latencies: [Int] { condition.withLock { timed } }
        /// Per message, nanoseconds until the last subscriber had it; -1 where one never did.
        var slowest: [Int] { condition.withLock { slowestByMessage } }
        var summary: String {
            condition.withLock { "\(ready) processes ready" + (problems.isEmpty ? "" : "; " + problems.joined(separator: "; ")) }
        }
    }

    /// One broker and its subscriber processes, all stopped by pid in `stop()`.
    final class Session {
        let port: Int
        let reports = Reports()
        private let folder: URL
        private var broker: Process?
        private var subscribers: [Process] = []
        private var inputs: [Pipe] = []
        private var launchedAt = ContinuousClock.now

        var processCount: Int { subscribers.count }

        /// The broker's user and system seconds so far, all its threads; nil when it is not running.
        var brokerCPUSeconds: Double? { broker.flatMap { ProcessCPU.seconds($0.processIdentifier) } }

        /// Starts the broker, then the subscriber processes; `timed` makes them report latencies.
        init(subscribers n: Int, qos: Int, expect: Int, timed: Bool, solo: Bool = false) throws {
            guard let brokerPath = MosquittoBench.which("mosquitto", extra: ["/usr/sbin"]) else {
                throw MQTTFanoutPublisher.Failure(description: "mosquitto is not installed (make deps)")
            }
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-bench-fanout-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            port = MosquittoBench.freePort()
            let config = folder.appendingPathComponent("mosquitto.conf")
            try """
                listener \(port) 127.0.0.1
                allow_anonymous true
                persistence false
                max_queued_messages \(max(1_000, expect))

                """.write(to: config, atomically: true, encoding: .utf8)
            do {
                broker = try MosquittoBench.launch(brokerPath, ["-c", config.path], folder: folder)
                try waitListening(deadline: Date().addingTimeInterval(10))
                let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
                launchedAt = .now
                for (index, count) in SubscriberPlan(n).counts.enumerated() {
                    let process = Process()
                    process.executableURL = URL(fileURLWithPath: executable)
                    process.arguments =
                        [
                            "mqtt-subscribers", "--port", "\(port)", "--count", "\(count)", "--qos", "\(qos)", "--topic",
                            MosquittoFanout.topic, "--expect", "\(expect)", "--prefix", "nh-bench-sub-\(index)",
                            "--timeout", "\(Int(MosquittoFanout.timeout.components.seconds) * 3)",
                        ] + (timed && (!solo || index == 0) ? ["--latency"] : []) + (solo ? ["--solo"] : [])
                    let output = Pipe()
                    let input = Pipe()
                    process.standardOutput = output
                    process.standardInput = input
                    try process.run()
                    subscribers.append(process)
                    inputs.append(input)
                    reports.read(output.fileHandleForReading, process: index)
                }
            } catch {
                stop()
                throw error
            }
        }

        /// Seconds from starting the subscriber processes until all have every SUBACK, or nil.
        func waitReady() -> Double? {
            let deadline = Date().addingTimeInterval(Double(MosquittoFanout.timeout.components.seconds))
            guard let ready = reports.waitReady(count: subscribers.count, deadline: deadline) else { return nil }
            return MosquittoFanout.seconds(from: launchedAt, to: ready)
        }

        /// Closes every subscriber's stdin, which makes it report and leave; anything still running
        /// after a grace period gets SIGTERM, then SIGKILL. The broker goes last.
        func stop() {
            for input in inputs { try? input.fileHandleForWriting.close() }
            inputs.removeAll()
            reports.waitEnded(count: subscribers.count, deadline: Date().addingTimeInterval(15))
            let processes = subscribers + (broker.map { [$0] } ?? [])
            for process in processes { Self.end(process) }
            subscribers.removeAll()
            broker = nil
            try? FileManager.default.removeItem(at: folder)
        }

        private static func end(_ process: Process) {
            func exited(within seconds: Double) -> Bool {
                let deadline = Date().addingTimeInterval(seconds)
                while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
                return !process.isRunning
            }
            if exited(within: 0) { return }
            process.terminate()
            if exited(within: 5) { return }
            kill(process.processIdentifier, SIGKILL)
            _ = exited(within: 5)
        }

        private func waitListening(deadline: Date) throws {
            while Date() < deadline {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_addr.s_addr = inet_addr("127.0.0.1")
                address.sin_port = UInt16(port).bigEndian
                let rc = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                close(fd)
                if rc == 0 { return }
                if let broker, !broker.isRunning { break }
                Thread.sleep(forTimeInterval: 0.02)
            }
            throw MQTTFanoutPublisher.Failure(description: "mosquitto did not listen on 127.0.0.1:\(port)")
        }
    }
}
