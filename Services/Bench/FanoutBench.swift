import Foundation
import HubProtocol
import ServiceKit

/// Broadcasts to N connected agents through the real services: N simulated agents (`AgentFleet`)
/// in processes of at most 2,500 each, every delivery acknowledged; then latency to one agent at a
/// fixed send rate with all N connected.
enum FanoutBench {
    static let perProcess = 2_500
    /// The short run of broadcasts whose CPU is taken from the main run's, for the CPU per delivery.
    static let shortBroadcasts = 2

    static func cpuName(n: Int) -> String { "fan-out N=\(n.formatted()): dispatcher CPU per acknowledged delivery" }
    static func instructionsName(n: Int) -> String { "fan-out N=\(n.formatted()): dispatcher instructions per acknowledged delivery" }

    /// A run of broadcasts, timed from the first send until every delivery is acknowledged and
    /// recorded, with what the dispatcher spent over that time as the meter reads it.
    struct Round {
        var reachedSeconds = 0.0
        /// `reachedSeconds` is the last receipt the fleets noted, not the next report of their counts.
        var reachedAtReceipt = false
        var ackedSeconds = 0.0
        var cost: Double?
        var deliveries = 0
    }

    /// What the cost per delivery reads of the dispatcher: its CPU time from /proc, or the
    /// instructions it runs under callgrind (started through `wrapper`).
    struct Meter {
        var name: (Int) -> String
        var unit: String
        /// From the difference in what `read` gives per delivery to the figure's unit.
        var scale: Double
        var baseline: (Int) -> String?
        /// What is read, for the figure's note, and the decimals it is shown with there.
        var what: String
        var decimals: Int
        var wrapper: ((String) throws -> [String])?
        var read: (Int32) -> Double?

        static var cpu: Meter {
            Meter(
                name: cpuName, unit: "µs", scale: 1e6, baseline: { MosquittoFanout.cpuName(n: $0, qos: 1) },
                what: "all threads, user+system CPU s", decimals: 2, wrapper: nil, read: ProcessCPU.seconds)
        }

        static func instructions(_ callgrind: Callgrind) throws -> Meter {
            try callgrind.check()
            return Meter(
                name: instructionsName, unit: "instr", scale: 1, baseline: { _ in nil }, what: "all threads, instructions (callgrind Ir)",
                decimals: 0, wrapper: callgrind.command, read: callgrind.instructions)
        }
    }

    /// Instructions per acknowledged delivery for a small fan-out, the dispatcher under callgrind:
    /// the same broadcasts as `run`, with no latency run; only that figure.
    static func instructions(agents: Int, broadcasts: Int) throws -> [BenchResult] {
        let callgrind = try Callgrind()
        defer { callgrind.remove() }
        let meter = try Meter.instructions(callgrind)
        return try run(agents: agents, broadcasts: broadcasts, latencySends: 0, rate: 1, meter: meter).filter { $0.name == meter.name(agents) }
    }

    /// With `hubs`, that many hubs of 10 installations each are made beside the default hub, whose
    /// agents the figures are of, before they register.
    static func run(
        agents: Int, broadcasts: Int, latencySends: Int, rate: Int, size: Int = 256, meter: Meter = .cpu, hubs: Int = 0
    ) throws -> [BenchResult] {
        // The floor under connecting: as many CURVE connections to a bare libzmq socket, first.
        let alone = meter.wrapper == nil ? try? CurveConnectBench.run(agents: agents) : nil
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        if let wrapper = meter.wrapper { cluster.wrappers["nh-dispatch"] = wrapper }
        try cluster.startServices()
        let dispatcher = cluster.environment["NH_DISPATCH_REQUESTS"]!
        if hubs > 0 {
            try HubsBench.makeHubs(cluster, count: hubs)
            try HubsBench.fillHubs(cluster, count: hubs, perHub: 10)
            try HubsBench.settle(cluster, installations: hubs * 10)
        }
        guard let dispatchProcess = cluster.process("nh-dispatch") else { return [] }
        Thread.sleep(forTimeInterval: 0.5)
        let baseline = residentBytes(dispatchProcess.processIdentifier)

        // Fleets register their installations, then connect on the word.
        var fleets: [FleetProcess] = []
        var remaining = agents
        while remaining > 0 {
            let count = min(perProcess, remaining)
            fleets.append(try FleetProcess(cluster: cluster, prefix: "a\(fleets.count)", count: count))
            remaining -= count
        }
        for fleet in fleets where !fleet.wait("registered", timeout: 300) {
            throw BenchError("fleet \(fleet.prefix) did not register its installations")
        }
        _ = waitFor(timeout: 60) { (try? cluster.waitHealthy(dispatcher).details?["installations"]) == String(agents + hubs * 10) }
        Thread.sleep(forTimeInterval: 0.5)
        let indexed = residentBytes(dispatchProcess.processIdentifier)
        // Connecting, with how many connections the kernel dropped meanwhile for a full accept
        // queue (retried by the client a second or more later).
        let overflowsBefore = CurveConnectBench.listenOverflows()
        let connectCPUBefore = ProcessCPU.seconds(dispatchProcess.processIdentifier)
        let connectStart = ContinuousClock.now
        for fleet in fleets { fleet.send("connect") }
        let allWelcomed = fleets.allSatisfy { $0.wait("welcomed", timeout: 120) }
        let connectSeconds = seconds(since: connectStart)
        let connectCPU = ProcessCPU.growth(from: connectCPUBefore, to: ProcessCPU.seconds(dispatchProcess.processIdentifier))
        let overflows = ProcessCPU.growth(from: overflowsBefore, to: CurveConnectBench.listenOverflows())
        _ = waitFor(timeout: 30) { (try? cluster.waitHealthy(dispatcher).details?["agents"]) == String(agents) }
        Thread.sleep(forTimeInterval: 0.5)
        let connected = residentBytes(dispatchProcess.processIdentifier)

        // Broadcasts: a short run, then the main one; the CPU per delivery is their difference.
        let publish = try cluster.client("NH_PUBLISH_REQUESTS")
        let padding = String(repeating: "x", count: max(0, size - 40))
        let expected = agents * broadcasts
        let before = try details(cluster, dispatcher)
        var sent = 0
        func round(_ count: Int) throws -> Round {
            var round = Round()
            let receivedBefore = fleets.reduce(0) { $0 + $1.stat("received") }
            let ackedBefore = Int(try details(cluster, dispatcher)["ackedTotal"] ?? "0") ?? 0
            let costBefore = meter.read(dispatchProcess.processIdentifier)
            let startNanoseconds = AgentFleet.monotonicNanoseconds()
            let start = ContinuousClock.now
            for _ in 0..<count {
                _ = try publish.call(SendNotification(
                    format: .template, properties: ["m": "b\(sent) \(padding)"], tagExpression: "fanout"))
                sent += 1
            }
            let deadline = Date().addingTimeInterval(180)
            while Date() < deadline {
                let received = fleets.reduce(0) { $0 + $1.stat("received") } - receivedBefore
                if round.reachedSeconds == 0 && received >= agents * count { round.reachedSeconds = seconds(since: start) }
                let acked = (try? details(cluster, dispatcher)["ackedTotal"]).flatMap { Int($0) } ?? 0
                if acked - ackedBefore >= agents * count {
                    round.ackedSeconds = seconds(since: start)
                    if round.reachedSeconds == 0 { round.reachedSeconds = round.ackedSeconds }
                    round.deliveries = agents * count
                    if let costBefore, let costAfter = meter.read(dispatchProcess.processIdentifier) {
                        round.cost = costAfter - costBefore
                    }
                    break
                }
                Thread.sleep(forTimeInterval: 0.02)
            }
            Thread.sleep(forTimeInterval: 1.1)
            // Once every agent has the round, the time of the last receipt, as each fleet noted it
            // (the fleets report their counts every 0.1 s, a step too coarse for a round of seconds).
            let received = fleets.reduce(0) { $0 + $1.stat("received") } - receivedBefore
            let lastReceipt = fleets.map { $0.stat("lastReceivedNs") }.max() ?? 0
            if round.deliveries > 0 && received >= agents * count && lastReceipt > Int(startNanoseconds) {
                round.reachedSeconds = Double(UInt64(lastReceipt) - startNanoseconds) / 1e9
                round.reachedAtReceipt = true
            }
            return round
        }
        let short = try round(Self.shortBroadcasts)
        let main = try round(broadcasts)
        let reachedSeconds = main.reachedSeconds
        let ackedSeconds = main.ackedSeconds
        let after = try details(cluster, dispatcher)
        let resends = (Int(after["resentTotal"] ?? "0") ?? 0) - (Int(before["resentTotal"] ?? "0") ?? 0)
        let duplicates = fleets.reduce(0) { $0 + $1.stat("duplicates") }
        // Deliveries acknowledged while the store held them in memory, so never written.
        let unwritten = (Int(after["acknowledgedUnwrittenTotal"] ?? "0") ?? 0) - (Int(before["acknowledgedUnwrittenTotal"] ?? "0") ?? 0)
        let unwrittenShare = Double(unwritten) / Double(max(1, agents * (Self.shortBroadcasts + broadcasts)))

        // Latency to one agent (agent 0 of the first fleet) at a fixed rate, all N still connected.
        let target = "a0-0"
        let interval = 1.0 / Double(max(1, rate))
        let latencyStart = ContinuousClock.now
        // How long each send took to be accepted (stored durably, answered), the first part of its latency.
        var accepted: [Double] = []
        accepted.reserveCapacity(latencySends)
        for index in 0..<latencySends {
            let due = latencyStart + .nanoseconds(Int64(Double(index) * interval * 1e9))
            let wait = ContinuousClock.now.duration(to: due)
            if wait > .zero { Thread.sleep(forTimeInterval: wait.inSeconds) }
            let sentAt = AgentFleet.monotonicNanoseconds()
            _ = try publish.call(SendNotification(
                format: .template, properties: ["m": "t=\(sentAt); \(padding)"], installationId: target))
            accepted.append(Double(AgentFleet.monotonicNanoseconds() - sentAt) / 1e6)
        }
        accepted.sort()
        let latencyDeadline = Date().addingTimeInterval(30)
        while Date() < latencyDeadline && fleets[0].stat("received") < fleets[0].count * sent + latencySends {
            Thread.sleep(forTimeInterval: 0.05)
        }
        for fleet in fleets { fleet.finish() }
        let latencies = fleets[0].latencies.sorted()

        let n = agents.formatted()
        var results: [BenchResult] = [
            BenchResult(name: "fan-out N=\(n): connect all agents", unit: "s", count: 0, seconds: 0,
                        baseline: MosquittoFanout.connectName(n: agents, qos: 1), value: connectSeconds,
                        note: allWelcomed ? connectNote(overflows: overflows, alone: alone, dispatcherCPU: connectCPU) : "not all welcomed within 120 s"),
            BenchResult(name: "fan-out N=\(n): reaching agents", unit: "dlv/s", count: reachedSeconds > 0 ? expected : 0,
                        seconds: reachedSeconds, baseline: MosquittoFanout.deliveryName(n: agents, qos: 1),
                        note: "\(broadcasts) broadcasts of \(size) B" + (main.reachedAtReceipt ? "" : "; the time from the fleets' 0.1 s reports")),
            BenchResult(name: "fan-out N=\(n): acknowledged, recorded", unit: "dlv/s", count: ackedSeconds > 0 ? expected : 0,
                        seconds: ackedSeconds, baseline: MosquittoFanout.deliveryName(n: agents, qos: 1),
                        note: "resends \(resends), duplicates seen by agents \(duplicates), \(Int((unwrittenShare * 100).rounded()))% never written"),
            costPerDelivery(agents: agents, short: short, main: main, meter: meter),
            BenchResult(name: "fan-out N=\(n): dispatcher memory per agent", unit: "KiB", count: 0, seconds: 0,
                        value: Double(max(0, connected - indexed)) / Double(agents) / 1024, note: "RSS growth as N agents connect"),
            BenchResult(name: "fan-out N=\(n): dispatcher memory per installation", unit: "B", count: 0, seconds: 0,
                        value: Double(max(0, indexed - baseline)) / Double(agents), note: "RSS growth as N installations are indexed"),
        ]
        if let alone {
            results.insert(
                contentsOf: CurveConnectBench.results(n: agents, outcome: alone), at: 1)
        }
        if !latencies.isEmpty {
            for (label, quantile) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
                results.append(BenchResult(
                    name: "latency to one agent, \(rate)/s, N=\(n): \(label)", unit: "ms", count: 0, seconds: 0,
                    baseline: MosquittoFanout.latencyName(n: agents, percentile: label),
                    value: latencies[min(latencies.count - 1, Int(Double(latencies.count) * quantile))],
                    note: "\(latencies.count) of \(latencySends) sends, send call to agent receipt; the call's answer (accepted, durable) "
                        + "\(label) \(BenchReport.format(accepted.isEmpty ? 0 : accepted[min(accepted.count - 1, Int(Double(accepted.count) * quantile))], decimals: 2)) ms"))
            }
        }
        return results
    }

    /// What connecting went through, what the kernel dropped meanwhile, the dispatcher's CPU over
    /// it (all threads), and the same connections' time to a bare libzmq socket.
    static func connectNote(overflows: Int?, alone: CurveConnectBench.Outcome?, dispatcherCPU: Double? = nil) -> String {
        var parts = ["CURVE handshake, ZAP, hello, welcome"]
        if let overflows { parts.append("\(overflows.formatted()) connections dropped by a full accept queue and retried") }
        if let dispatcherCPU { parts.append("dispatcher CPU \(BenchReport.format(dispatcherCPU, decimals: 2)) s") }
        if let alone { parts.append("libzmq CURVE alone: \(BenchReport.format(alone.seconds, decimals: 2)) s") }
        return parts.joined(separator: "; ")
    }

    /// The dispatcher's cost per acknowledged delivery as `meter` reads it; its CPU beside the
    /// Mosquitto broker's per QoS 1 delivery.
    static func costPerDelivery(agents: Int, short: Round, main: Round, meter: Meter = .cpu) -> BenchResult {
        let name = meter.name(agents)
        let baseline = meter.baseline(agents)
        guard let shortCost = short.cost, let mainCost = main.cost,
            let value = ProcessCPU.perDelivery(short: (shortCost, short.deliveries), long: (mainCost, main.deliveries))
        else {
            return BenchResult(name: name, unit: meter.unit, count: 0, seconds: 0, baseline: baseline, note: "not measured: a run did not finish")
        }
        return BenchResult(
            name: name, unit: meter.unit, count: 0, seconds: 0, baseline: baseline, value: value * meter.scale,
            note: "\(meter.what), \(main.deliveries) − \(short.deliveries) deliveries: \(BenchReport.format(mainCost, decimals: meter.decimals)) − \(BenchReport.format(shortCost, decimals: meter.decimals))")
    }

    static func details(_ cluster: HubCluster, _ endpoint: String) throws -> [String: String] {
        try cluster.waitHealthy(endpoint).details ?? [:]
    }

    static func waitFor(timeout: TimeInterval, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return false
    }

    /// A process's resident memory, from /proc.
    static func residentBytes(_ pid: Int32) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return 0 }
        return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One `nh-bench fleet` process and what it has reported.
final class FleetProcess: @unchecked Sendable {
    let prefix: String
    let count: Int
    private let process: Process
    private let input = Pipe()
    private let output = Pipe()
    private let condition = NSCondition()
    private var events: Set<String> = []
    private var stats: [String: Int] = [:]
    private(set) var latencies: [Double] = []

    /// The agents' hellos and transport heartbeats follow the cluster's `agentHeartbeatMs`.
    init(cluster: HubCluster, prefix: String, count: Int, tag: String? = nil) throws {
        self.prefix = prefix
        self.count = count
        process = Process()
        process.executableURL = cluster.binDirectory.appendingPathComponent("nh-bench")
        process.arguments = ["fleet", "--count", String(count), "--prefix", prefix] + (tag.map { ["--tag", $0] } ?? [])
        process.environment = cluster.environment
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        cluster.adopt(process)
        JSONLines.read(output.fileHandleForReading, line: { [self] object in
            guard let event = object["event"] as? String else { return }
            condition.lock()
            events.insert(event)
            if event == "stats" {
                for (key, value) in object { if let number = value as? Int { stats[key] = number } }
            }
            if event == "latencies" { latencies = object["ms"] as? [Double] ?? [] }
            condition.broadcast()
            condition.unlock()
        }) { [self] in
            condition.lock()
            events.insert("exit")
            condition.broadcast()
            condition.unlock()
        }
    }

    func send(_ line: String) {
        input.fileHandleForWriting.write(Data((line + "\n").utf8))
    }

    func wait(_ event: String, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !events.contains(event) {
            if events.contains("exit") || !condition.wait(until: deadline) { return false }
        }
        return true
    }

    func stat(_ name: String) -> Int {
        condition.lock()
        defer { condition.unlock() }
        return stats[name] ?? 0
    }

    /// Closes the fleet's input, which makes it report its latencies and exit.
    func finish() {
        try? input.fileHandleForWriting.close()
        _ = wait("exit", timeout: 30)
        process.waitUntilExit()
    }
}
