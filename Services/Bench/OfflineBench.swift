import Foundation
import HubProtocol
import Postgres
import ServiceKit

/// What offline devices cost: N Linux installations imported by a job with the tag Offline, and
/// beside them 1,000 simulated agents with the same tag, connected. Then broadcasts to the tag:
/// per broadcast, the time until it is planned and durable (the dispatcher's outcome Completed),
/// and what it adds to the data folder and to the dispatcher's resident memory. A broadcast is
/// stored once for the agents away, so these stay fixed however many there are. Then 10,000 more
/// agents, registered but not connected, miss 10 broadcasts and connect: the time until each has
/// caught up on every one, and how many it was given twice.
enum OfflineBench {
    struct Scale {
        var devices = 1_000_000
        var broadcasts = 3
        var connected = 1_000
        var returning = 10_000
        var missed = 10
    }

    static func run(_ scale: Scale) throws -> [BenchResult] {
        let devices = scale.devices
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        try cluster.startServices()
        guard let dispatcher = cluster.process("nh-dispatch")?.processIdentifier else { throw BenchError("no dispatcher") }
        Thread.sleep(forTimeInterval: 1)
        let idle = FanoutBench.residentBytes(dispatcher)
        let imported = try importOffline(cluster, count: devices)
        let indexed = FanoutBench.residentBytes(dispatcher)

        let here = try FleetProcess(cluster: cluster, prefix: "here", count: scale.connected, tag: "Offline")
        guard here.wait("registered", timeout: 300) else { throw BenchError("the connected agents did not register") }
        here.send("connect")
        guard here.wait("welcomed", timeout: 120) else { throw BenchError("the connected agents were not all welcomed") }
        try HubsBench.settle(cluster, installations: devices + scale.connected)

        var planSeconds: [Double] = []
        var storeGrowth: [Int] = []
        var memoryGrowth: [Int] = []
        var planned = 0
        for _ in 0..<scale.broadcasts {
            let (store, memory) = (dataBytes(cluster.dataDirectory), FanoutBench.residentBytes(dispatcher))
            let phase = try HubsBench.plan(cluster, broadcasts: 1)
            planSeconds.append(phase.planSeconds)
            planned += phase.planned
            // The dispatcher writes what it planned in its next group; the WAL is checkpointed in the background.
            Thread.sleep(forTimeInterval: 2)
            storeGrowth.append(dataBytes(cluster.dataDirectory) - store)
            memoryGrowth.append(FanoutBench.residentBytes(dispatcher) - memory)
        }
        let reached = waitFor(here, received: scale.connected * scale.broadcasts, timeout: 60)
        let catchUp = try catchUp(cluster, scale: scale, total: devices + scale.connected)
        here.finish()
        func median<T: Comparable>(_ values: [T]) -> T { values.sorted()[values.count / 2] }
        let perDevice = { (bytes: Int) in Double(bytes) / Double(max(devices, 1)) }
        let where_ = "\(devices.formatted()) offline devices"
        let beside = "\(where_) and \(scale.connected.formatted()) connected agents"
        let megabytes = { (bytes: Int) in String(format: "%.1f", Double(bytes) / 1_048_576) }
        return importResults(imported, devices: devices, store: "", note: "in one file of JSON lines (ImportCreateRegistrations)") + [
            BenchResult(
                name: "offline: dispatcher memory per installation indexed", unit: "B", count: devices, seconds: 0,
                value: perDevice(indexed - idle), note: "resident growth over \(where_); goal 200 B"),
            BenchResult(
                name: "offline: a broadcast planned and durable", unit: "ms", count: 0, seconds: 0, value: median(planSeconds) * 1000,
                note: "to \(beside) (targets \(planned / max(scale.broadcasts, 1))), median of \(scale.broadcasts); "
                    + "the connected ones had every broadcast: \(reached ? "yes" : "no"); goal 5 s for 1,000,000"),
            BenchResult(
                name: "offline: data folder growth per broadcast", unit: "MB", count: 0, seconds: 0,
                value: Double(median(storeGrowth)) / 1_048_576,
                note: "to \(beside), median of \(scale.broadcasts) (\(storeGrowth.map { megabytes($0) }.joined(separator: ", ")) MB); goal 16 MB for 1,000,000"),
            BenchResult(
                name: "offline: dispatcher memory growth per broadcast", unit: "MB", count: 0, seconds: 0,
                value: Double(memoryGrowth.max() ?? 0) / 1_048_576,
                note: "to \(beside), the largest of \(scale.broadcasts) (\(memoryGrowth.map { megabytes($0) }.joined(separator: ", ")) MB); goal 32 MB for 1,000,000"),
            BenchResult(
                name: "offline: devices back, all caught up", unit: "s", count: 0, seconds: 0, value: catchUp.seconds,
                note: "\(scale.returning.formatted()) agents connecting after missing \(scale.missed) broadcasts, beside \(where_): "
                    + "\(catchUp.received.formatted()) of \(catchUp.expected.formatted()) deliveries, \(catchUp.duplicates) given twice; goal 10 s, 0 twice"),
        ]
    }

    /// `returning` agents registered but not connected miss `missed` broadcasts, then connect: the
    /// seconds until they have every one, what they received, and what twice.
    static func catchUp(_ cluster: HubCluster, scale: Scale, total: Int) throws -> (seconds: Double, received: Int, expected: Int, duplicates: Int) {
        // A process holds two descriptors per agent: fleets of at most `FanoutBench.perProcess`.
        var fleets: [FleetProcess] = []
        var remaining = scale.returning
        while remaining > 0 {
            let count = min(FanoutBench.perProcess, remaining)
            fleets.append(try FleetProcess(cluster: cluster, prefix: "back\(fleets.count)", count: count, tag: "Offline"))
            remaining -= count
        }
        defer { for fleet in fleets { fleet.finish() } }
        for fleet in fleets where !fleet.wait("registered", timeout: 300) { throw BenchError("fleet \(fleet.prefix) did not register") }
        try HubsBench.settle(cluster, installations: total + scale.returning)
        _ = try HubsBench.plan(cluster, broadcasts: scale.missed)
        let start = ContinuousClock.now
        for fleet in fleets { fleet.send("connect") }
        for fleet in fleets { _ = waitFor(fleet, received: fleet.count * scale.missed, timeout: 120) }
        let seconds = seconds(since: start)
        // Anything given twice would come within the resend time.
        Thread.sleep(forTimeInterval: 2)
        return (seconds, fleets.reduce(0) { $0 + $1.stat("received") }, scale.returning * scale.missed, fleets.reduce(0) { $0 + $1.stat("duplicates") })
    }

    /// Waits until a fleet has received `received` deliveries; whether it did in time.
    static func waitFor(_ fleet: FleetProcess, received: Int, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if fleet.stat("received") >= received { return true }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return false
    }

    /// The same import with the stores on a throwaway PostgreSQL server (`Tests/Support/pgserver.py`),
    /// two dispatchers splitting the shards; then broadcasts to every device: the time until both
    /// have planned their shards of it, and what it adds to the database and to each dispatcher.
    static func onPostgres(devices: Int, broadcasts: Int = 3) throws -> [BenchResult] {
        let server = try ChildScript.start(
            [try RepositoryFile.locate("Tests/Support/pgserver.py"), "serve"], what: "a throwaway PostgreSQL server", timeout: 60
        ) { $0.hasPrefix("postgresql://") }
        defer { server.stop() }
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        let database = try PostgresConnection.createDatabase(on: server.line, prefix: "nh_bench_")
        cluster.environment["NH_STORE"] = database
        cluster.environment["NH_DISPATCH_ADVERTISE"] = cluster.environment["NH_DISPATCH_AGENTS"]
        try cluster.startServices()
        let (request, agents) = (try HubCluster.freeEndpoint(), try HubCluster.freeEndpoint())
        let second = try cluster.start(
            "nh-dispatch", environment: ["NH_DISPATCH_REQUESTS": request, "NH_DISPATCH_AGENTS": agents, "NH_DISPATCH_ADVERTISE": agents])
        let pids = [cluster.process("nh-dispatch")?.processIdentifier, second.processIdentifier].compactMap { $0 }
        let imported = try importOffline(cluster, count: devices)
        // Both dispatchers index every installation; each plans its shards.
        let settleDeadline = Date().addingTimeInterval(120)
        while Date() < settleDeadline, try cluster.waitHealthy(request).details?["installations"] != String(devices) {
            Thread.sleep(forTimeInterval: 0.1)
        }
        let connection = try PostgresConnection(url: database)
        defer { connection.close() }
        func databaseBytes() throws -> Int { Int(try connection.queryOne("SELECT pg_database_size(current_database())")?[0].string ?? "0") ?? 0 }
        let root = try HubsBench.rootCredential(cluster)
        let publish = try HubCluster.client(cluster.environment["NH_PUBLISH_REQUESTS"]!, credential: root, bus: cluster.bus)
        publish.auth = { root.token(for: HubsBench.namespace) }
        let dispatch = try HubCluster.client(cluster.environment["NH_DISPATCH_REQUESTS"]!, credential: root, bus: cluster.bus)
        dispatch.auth = { root.token(for: HubsBench.namespace) }
        defer {
            publish.close()
            dispatch.close()
        }
        var planSeconds: [Double] = [], storeGrowth: [Int] = [], memoryGrowth: [Int] = []
        for _ in 0..<broadcasts {
            let (store, memory) = (try databaseBytes(), pids.map { FanoutBench.residentBytes($0) })
            let start = ContinuousClock.now
            let id = try publish.call(SendNotification(format: .template, properties: ["messageParam": "all"], tagExpression: "Offline")).notificationId
            let deadline = Date().addingTimeInterval(120)
            // Each dispatcher adds its shards' targets to the one outcome.
            while Date() < deadline, (try? dispatch.call(OutcomeRequest(notificationId: id)))?.targets != devices {
                Thread.sleep(forTimeInterval: 0.002)
            }
            planSeconds.append(seconds(since: start))
            Thread.sleep(forTimeInterval: 2)
            storeGrowth.append(try databaseBytes() - store)
            memoryGrowth.append(zip(pids, memory).map { FanoutBench.residentBytes($0) - $1 }.max() ?? 0)
        }
        func median<T: Comparable>(_ values: [T]) -> T { values.sorted()[values.count / 2] }
        let megabytes = { (bytes: Int) in String(format: "%.1f", Double(bytes) / 1_048_576) }
        let scale = "\(devices.formatted()) offline devices, 2 dispatchers on PostgreSQL"
        return importResults(imported, devices: devices, store: ", PostgreSQL", note: "stores on a throwaway server with fsync off, 2 dispatchers") + [
            BenchResult(
                name: "offline: a broadcast planned and durable, PostgreSQL", unit: "ms", count: 0, seconds: 0, value: median(planSeconds) * 1000,
                note: "to \(scale), until both had added their shards' targets, median of \(broadcasts)"),
            BenchResult(
                name: "offline: database growth per broadcast, PostgreSQL", unit: "MB", count: 0, seconds: 0, value: Double(median(storeGrowth)) / 1_048_576,
                note: "to \(scale), median of \(broadcasts) (\(storeGrowth.map { megabytes($0) }.joined(separator: ", ")) MB)"),
            BenchResult(
                name: "offline: dispatcher memory growth per broadcast, PostgreSQL", unit: "MB", count: 0, seconds: 0,
                value: Double(memoryGrowth.max() ?? 0) / 1_048_576,
                note: "to \(scale), the larger of the two dispatchers', the largest of \(broadcasts) (\(memoryGrowth.map { megabytes($0) }.joined(separator: ", ")) MB)"),
        ]
    }

    /// The import's two figures: until the job completed, and until the dispatcher had every installation.
    static func importResults(_ imported: (job: Double, indexed: Double), devices: Int, store: String, note: String) -> [BenchResult] {
        let scale = "\(devices.formatted()) offline devices"
        return [
            BenchResult(
                name: "offline: installations imported by a job\(store)", unit: "inst/s", count: devices, seconds: imported.job,
                note: "\(scale), \(note), until the job completed; goal: 1,000,000 in 60 s"),
            BenchResult(
                name: "offline: imported and indexed by the dispatcher\(store)", unit: "inst/s", count: devices, seconds: imported.indexed,
                note: "\(scale), from the job's start until the dispatcher has every one"),
        ]
    }

    /// `count` offline linux agents with a template and the tag Offline, written to a file and
    /// imported by a job; the seconds until the job completed, and until the dispatcher had them all.
    static func importOffline(_ cluster: HubCluster, count: Int) throws -> (job: Double, indexed: Double) {
        let file = cluster.dataDirectory.appendingPathComponent("offline-import.jsonl")
        FileManager.default.createFile(atPath: file.path, contents: nil)
        let output = try FileHandle(forWritingTo: file)
        var chunk = Data()
        for index in 0..<count {
            chunk.append(contentsOf: #"{"installationId":"offline-\#(index)","platform":"linux","pushChannel":"offline-agent-\#(index)","tags":["Offline"],"templates":{"t":{"body":"{\"message\":\"$(messageParam)\"}"}}}"#.utf8)
            chunk.append(UInt8(ascii: "\n"))
            if chunk.count > 1 << 20 {
                try output.write(contentsOf: chunk)
                chunk.removeAll(keepingCapacity: true)
            }
        }
        try output.write(contentsOf: chunk)
        try output.close()
        let root = try HubsBench.rootCredential(cluster)
        let registry = try HubCluster.client(cluster.environment["NH_REGISTRY_REQUESTS"]!, credential: root, bus: cluster.bus)
        registry.auth = { root.token(for: HubsBench.namespace) }
        defer { registry.close() }
        let start = ContinuousClock.now
        var job = try registry.call(JobCreate(type: .importCreate, importFile: file.path, outputDirectory: cluster.dataDirectory.path))
        while !job.status.finished {
            Thread.sleep(forTimeInterval: 0.05)
            job = try registry.call(JobGet(jobId: job.jobId))
        }
        let jobSeconds = seconds(since: start)
        guard job.status == .completed, job.applied == count else {
            throw BenchError("the import job ended \(job.status.rawValue) with \(job.applied) of \(count) applied: \(job.failure ?? "")")
        }
        // settle waits a second past the dispatcher having every installation.
        try HubsBench.settle(cluster, installations: count)
        return (jobSeconds, seconds(since: start) - 1)
    }

    /// Every file's size in the data folder, its subfolders included.
    static func dataBytes(_ directory: URL) -> Int {
        guard let walker = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: [.fileSizeKey]) else { return 0 }
        var total = 0
        for case let url as URL in walker {
            total += (try? url.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0
        }
        return total
    }
}
