import Bus
import DispatchCore
import Foundation
import HubProtocol
import Postgres
import ServiceKit

/// Fan-out with the stores on PostgreSQL, served by one dispatcher and then by two that split the
/// 64 shards between them, with what the dispatchers spend in CPU for it; first, the same with one
/// dispatcher on SQLite files, the reference of one on PostgreSQL. Each round has a fresh
/// database on one throwaway server (`python3 Tests/Support/pgserver.py serve`) and fresh services;
/// N simulated agents (`AgentFleet`) are given every dispatcher's agent endpoint and follow the
/// redirect to their shard's owner; B template broadcasts are timed until every delivery is
/// acknowledged. The CPU figure is the dispatchers' user and system time over the broadcasts
/// (/proc/PID/stat), summed over the dispatcher processes, per 1,000 acknowledged deliveries
/// (their `ackedTotal` growth, summed): with two dispatchers it should stay near one's, the work
/// being split between them, not done twice.
enum FanoutShardsBench {
    static let defaultAgents = 10_000
    /// The most two dispatchers' CPU per delivery may be over one's: the goal.
    static let goal = 1.1

    static func rateName(n: Int, dispatchers: Int) -> String {
        "fan-out \(n.formatted()) on PostgreSQL, \(dispatchers) dispatcher\(dispatchers == 1 ? "" : "s")"
    }

    static func cpuName(dispatchers: Int) -> String {
        dispatchers == 1 ? "CPU s per 1,000 acked, 1 dispatcher" : "CPU s per 1,000 acked, \(dispatchers) dispatchers, summed"
    }

    /// What one round measured, per dispatcher in start order.
    struct Round {
        var dispatchers: Int
        var expected: Int
        /// From the first send until every delivery was acknowledged; 0 when they were not all.
        var seconds: Double
        var cpuSeconds: [Double]
        var acked: [Int]
        var shards: [Int]
        var resends = 0
        var duplicates = 0
        var redirected = 0
        /// Deliveries acknowledged while their dispatcher held them in memory, so never written.
        var unwritten = 0
        /// CPU seconds a second the dispatchers spent, summed, with every agent connected and
        /// nothing to deliver: hellos and transport heartbeats, timers, leases.
        var idlePerSecond = 0.0

        var ackedTotal: Int { acked.reduce(0, +) }
        /// The share of the expected deliveries never written, as "83% never written".
        var neverWritten: String { "\(Int((Double(unwritten) / Double(max(1, expected)) * 100).rounded()))% never written" }
        var cpuPerThousand: Double? { ProcessCPU.perThousand(cpuSeconds: cpuSeconds.reduce(0, +), count: ackedTotal) }

        /// Each dispatcher's shards and share of the acknowledgements, as "32 shards, 50.2% of acks".
        var shares: String {
            zip(shards, acked).enumerated().map { index, pair in
                let share = ackedTotal > 0 ? Double(pair.1) / Double(ackedTotal) * 100 : 0
                return "#\(index + 1) \(pair.0) shards, \(String(format: "%.1f", share))% of acks, \(String(format: "%.2f", cpuSeconds[index])) CPU s"
            }.joined(separator: "; ")
        }
    }

    static func run(agents: Int, broadcasts: Int) throws -> [BenchResult] {
        let server = try ChildScript.start(
            [try RepositoryFile.locate("Tests/Support/pgserver.py"), "serve"], what: "a throwaway PostgreSQL server", timeout: 60
        ) { $0.hasPrefix("postgresql://") }
        defer { server.stop() }
        let sqlite = Result { try round(dispatchers: 1, agents: agents, broadcasts: broadcasts, database: nil) }
        let rounds = [1, 2].map { count in
            Result {
                try round(
                    dispatchers: count, agents: agents, broadcasts: broadcasts,
                    database: try PostgresConnection.createDatabase(on: server.line, prefix: "nh_bench_"))
            }
        }
        return results(n: agents, broadcasts: broadcasts, sqlite: sqlite, one: rounds[0], two: rounds[1])
    }

    static func sqliteRateName(n: Int) -> String { "fan-out \(n.formatted()) on SQLite, 1 dispatcher" }
    static let sqliteCPUName = "CPU s per 1,000 acked, 1 dispatcher on SQLite"
    /// The least one dispatcher on PostgreSQL should reach beside one on SQLite: the goal.
    static let postgresGoal = 0.8

    /// The figures from the three rounds: each rate, each CPU cost; one dispatcher on PostgreSQL
    /// beside one on SQLite, two beside one.
    static func results(
        n: Int, broadcasts: Int, sqlite: Result<Round, any Error>, one: Result<Round, any Error>, two: Result<Round, any Error>
    ) -> [BenchResult] {
        var results: [BenchResult] = []
        let rounds: [(name: String, baseline: String?, outcome: Result<Round, any Error>, more: (Round) -> String)] = [
            (sqliteRateName(n: n), nil, sqlite, { _ in "; the stores on SQLite files" }),
            (rateName(n: n, dispatchers: 1), sqliteRateName(n: n), one, { _ in "; goal ≥ \(postgresGoal)× one on SQLite" }),
            (rateName(n: n, dispatchers: 2), rateName(n: n, dispatchers: 1), two, { ", \($0.redirected) hellos redirected" }),
        ]
        for (name, baseline, outcome, more) in rounds {
            switch outcome {
            case .success(let round):
                let note = "\(broadcasts) template broadcasts, every delivery acknowledged; resends \(round.resends), duplicates seen by agents "
                    + "\(round.duplicates), \(round.neverWritten)"
                results.append(BenchResult(
                    name: name, unit: "dlv/s", count: round.seconds > 0 ? round.expected : 0, seconds: round.seconds, baseline: baseline,
                    note: note + more(round)))
            case .failure(let error):
                results.append(BenchResult(name: name, unit: "dlv/s", count: 0, seconds: 0, baseline: baseline, note: "\(error)"))
            }
        }
        if case .success(let round) = sqlite, let cost = round.cpuPerThousand {
            results.append(BenchResult(
                name: sqliteCPUName, unit: "s", count: 0, seconds: 0, value: cost,
                note: "user+system time of the dispatcher over the broadcasts, per 1,000 it acknowledged; stores on SQLite"))
        }
        for (count, outcome) in [(1, one), (2, two)] {
            let baseline = count == 1 ? sqliteCPUName : cpuName(dispatchers: 1)
            guard case .success(let round) = outcome, let cost = round.cpuPerThousand else {
                results.append(BenchResult(name: cpuName(dispatchers: count), unit: "s", count: 0, seconds: 0, baseline: baseline, note: "not measured"))
                continue
            }
            let idle = String(format: "idle with the agents connected %.2f CPU s/s", round.idlePerSecond)
            let note = count == 1
                ? "user+system time of the dispatcher over the broadcasts, per 1,000 it acknowledged; \(round.shares); \(idle)"
                : "summed over both dispatchers; goal ≤ \(goal)× one dispatcher's (the work is split, not repeated); \(round.shares); \(idle), summed"
            results.append(BenchResult(name: cpuName(dispatchers: count), unit: "s", count: 0, seconds: 0, baseline: baseline, value: cost, note: note))
        }
        if case .success(let first) = one, case .success(let second) = two, let oneCost = first.cpuPerThousand, let twoCost = second.cpuPerThousand {
            for dispatchers in projected {
                guard let rate = projectedRate(one: oneCost, two: twoCost, dispatchers: dispatchers) else { continue }
                results.append(BenchResult(
                    name: projectionName(dispatchers: dispatchers), unit: "dlv/s", count: 0, seconds: 0, value: rate,
                    note: "on paper, from the CPU s per 1,000 above (one dispatcher \(BenchReport.format(oneCost, decimals: 3)), two summed "
                        + "\(BenchReport.format(twoCost, decimals: 3))): each dispatcher repeats the difference (reading and planning every "
                        + "notification) and they split the rest; a core for each, the store and the agents elsewhere"))
            }
        }
        return results
    }

    /// The dispatcher counts projected on paper.
    static let projected = [8, 16]

    static func projectionName(dispatchers: Int) -> String { "projected: \(dispatchers) dispatchers, a core each" }

    /// Deliveries a second that `dispatchers` dispatchers would take, each on a core of its own,
    /// from the CPU seconds per 1,000 deliveries of one and of two (summed): what the second
    /// dispatcher added is what each repeats for itself (every notification read and planned for
    /// its shards), the rest is split among them. Nil when the figures say nothing is split.
    static func projectedRate(one: Double, two: Double, dispatchers: Int) -> Double? {
        let repeated = max(0, two - one)
        let split = one - repeated
        guard split > 0, dispatchers > 0 else { return nil }
        return 1_000 / (repeated + split / Double(dispatchers))
    }

    /// One round: fresh services on `database` with `count` dispatchers, each with requests, agent
    /// and advertised endpoints of its own; N agents registered and connected; B broadcasts.
    static func round(dispatchers count: Int, agents: Int, broadcasts: Int, database: String?) throws -> Round {
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        if let database { cluster.environment["NH_STORE"] = database }
        cluster.environment["NH_DISPATCH_ADVERTISE"] = cluster.environment["NH_DISPATCH_AGENTS"]
        try cluster.startServices()
        var requests = [cluster.environment["NH_DISPATCH_REQUESTS"]!]
        var agentEndpoints = [cluster.environment["NH_DISPATCH_AGENTS"]!]
        var processes = [cluster.process("nh-dispatch")!]
        while processes.count < count {
            let request = try HubCluster.freeEndpoint(), agent = try HubCluster.freeEndpoint()
            processes.append(try cluster.start(
                "nh-dispatch", environment: ["NH_DISPATCH_REQUESTS": request, "NH_DISPATCH_AGENTS": agent, "NH_DISPATCH_ADVERTISE": agent]))
            try cluster.waitHealthy(request)
            requests.append(request)
            agentEndpoints.append(agent)
        }
        let health = try requests.map { try HubClient(connect: $0, policy: RetryPolicy(timeout: 5_000, attempts: 1), curve: cluster.bus?.client) }
        defer { health.forEach { $0.close() } }
        func details() -> [[String: String]] { health.map { (try? $0.call(HealthRequest()).details) ?? [:] } }
        func total(_ all: [[String: String]], _ key: String) -> [Int] { all.map { Int($0[key] ?? "") ?? 0 } }

        // Every agent is given every dispatcher and is redirected to its shard's owner.
        cluster.environment["NH_DISPATCH_AGENTS"] = agentEndpoints.joined(separator: ",")
        cluster.environment["NH_DISPATCH_ADVERTISE"] = nil
        var fleets: [FleetProcess] = []
        var remaining = agents
        while remaining > 0 {
            let size = min(FanoutBench.perProcess, remaining)
            fleets.append(try FleetProcess(cluster: cluster, prefix: "a\(fleets.count)", count: size))
            remaining -= size
        }
        defer { for fleet in fleets { fleet.finish() } }
        for fleet in fleets where !fleet.wait("registered", timeout: 300) {
            throw BenchError("fleet \(fleet.prefix) did not register its installations")
        }
        let share = Shards.fairShare(dispatchers: count)
        guard FanoutBench.waitFor(timeout: 60, {
            let all = details()
            // One dispatcher on SQLite holds no shards: it serves them all.
            return total(all, "installations").allSatisfy { $0 == agents } && (database == nil || total(all, "shards").allSatisfy { $0 == share })
        }) else {
            throw BenchError("the dispatchers did not index \(agents) installations and hold \(share) shards each: \(describe(details()))")
        }
        for fleet in fleets { fleet.send("connect") }
        guard fleets.allSatisfy({ $0.wait("welcomed", timeout: 180) }),
            FanoutBench.waitFor(timeout: 30, { total(details(), "agents").reduce(0, +) == agents })
        else { throw BenchError("not all \(agents) agents connected: \(describe(details()))") }
        Thread.sleep(forTimeInterval: 0.5)
        let idleStart = ContinuousClock.now
        let idleBefore = processes.map { ProcessCPU.seconds($0.processIdentifier) ?? 0 }
        Thread.sleep(forTimeInterval: 2)
        let idle = zip(processes.map { ProcessCPU.seconds($0.processIdentifier) ?? 0 }, idleBefore).map { $0 - $1 }.reduce(0, +)
            / seconds(since: idleStart)

        // Broadcasts, timed and costed from the first send until every delivery is acknowledged.
        let publish = try cluster.client("NH_PUBLISH_REQUESTS")
        defer { publish.close() }
        // Bodies of 256 bytes, as the fan-out figures send.
        let padding = String(repeating: "x", count: FanoutPayload.size - 40)
        let expected = agents * broadcasts
        let before = details()
        let ackedBefore = total(before, "ackedTotal")
        let cpuBefore = processes.map { ProcessCPU.seconds($0.processIdentifier) ?? 0 }
        let start = ContinuousClock.now
        for index in 0..<broadcasts {
            _ = try publish.call(SendNotification(format: .template, properties: ["m": "b\(index) \(padding)"], tagExpression: "fanout"))
        }
        var ackedSeconds = 0.0
        var acked = [Int](repeating: 0, count: count)
        var cpuAfter = cpuBefore
        let deadline = Date().addingTimeInterval(180)
        while Date() < deadline {
            acked = zip(total(details(), "ackedTotal"), ackedBefore).map { $0 - $1 }
            if acked.reduce(0, +) >= expected {
                cpuAfter = processes.map { ProcessCPU.seconds($0.processIdentifier) ?? 0 }
                ackedSeconds = seconds(since: start)
                break
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        if ackedSeconds == 0 {
            cpuAfter = processes.map { ProcessCPU.seconds($0.processIdentifier) ?? 0 }
        }
        let after = details()
        var round = Round(
            dispatchers: count, expected: expected, seconds: ackedSeconds, cpuSeconds: zip(cpuAfter, cpuBefore).map { $0 - $1 },
            acked: acked, shards: total(after, "shards"))
        round.resends = zip(total(after, "resentTotal"), total(before, "resentTotal")).map { $0 - $1 }.reduce(0, +)
        round.duplicates = fleets.reduce(0) { $0 + $1.stat("duplicates") }
        round.redirected = fleets.reduce(0) { $0 + $1.stat("redirected") }
        round.idlePerSecond = idle
        // Once the last group is written and the totals read again (health reads them once a second).
        Thread.sleep(forTimeInterval: 2.5)
        round.unwritten = zip(total(details(), "acknowledgedUnwrittenTotal"), total(before, "acknowledgedUnwrittenTotal"))
            .map { $0 - $1 }.reduce(0, +)
        return round
    }

    /// What each dispatcher said of its installations, shards and agents, for a failure's message.
    static func describe(_ all: [[String: String]]) -> String {
        all.enumerated().map { index, details in
            "#\(index + 1): " + ["installations", "shards", "agents"].map { "\($0) \(details[$0] ?? "?")" }.joined(separator: ", ")
        }.joined(separator: "; ")
    }
}
