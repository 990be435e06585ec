import Foundation
import HubProtocol
import Postgres
import ServiceKit

/// What offline devices cost: N Linux installations registered with the tag Offline, none
/// connected, then broadcasts to them. Registration over the bus; the dispatcher's resident memory
/// per installation indexed; per broadcast, the time until it is planned and durable (the
/// dispatcher's outcome Completed), and what it adds to the data folder and to the dispatcher's
/// resident memory, per offline device. A broadcast stored once would add a fixed amount.
enum OfflineBench {
    static func run(devices: Int, broadcasts: Int = 3) throws -> [BenchResult] {
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        try cluster.startServices()
        guard let dispatcher = cluster.process("nh-dispatch")?.processIdentifier else { throw BenchError("no dispatcher") }
        Thread.sleep(forTimeInterval: 1)
        let idle = FanoutBench.residentBytes(dispatcher)
        let imported = try importOffline(cluster, count: devices)
        let indexed = FanoutBench.residentBytes(dispatcher)

        var planSeconds: [Double] = []
        var storeGrowth: [Int] = []
        var memoryGrowth: [Int] = []
        var planned = 0
        for _ in 0..<broadcasts {
            let (store, memory) = (dataBytes(cluster.dataDirectory), FanoutBench.residentBytes(dispatcher))
            let phase = try HubsBench.plan(cluster, broadcasts: 1)
            planSeconds.append(phase.planSeconds)
            planned += phase.planned
            // The dispatcher writes what it planned in its next group; the WAL is checkpointed in the background.
            Thread.sleep(forTimeInterval: 2)
            storeGrowth.append(dataBytes(cluster.dataDirectory) - store)
            memoryGrowth.append(FanoutBench.residentBytes(dispatcher) - memory)
        }
        func median<T: Comparable>(_ values: [T]) -> T { values.sorted()[values.count / 2] }
        let perDevice = { (bytes: Int) in Double(bytes) / Double(max(devices, 1)) }
        let scale = "\(devices.formatted()) offline devices"
        return importResults(imported, devices: devices, store: "", note: "in one file of JSON lines (ImportCreateRegistrations)") + [
            BenchResult(
                name: "offline: dispatcher memory per installation indexed", unit: "B", count: devices, seconds: 0,
                value: perDevice(indexed - idle), note: "resident growth over \(scale); goal 200 B"),
            BenchResult(
                name: "offline: a broadcast planned and durable", unit: "ms", count: 0, seconds: 0, value: median(planSeconds) * 1000,
                note: "to \(scale) (targets \(planned / max(broadcasts, 1))), median of \(broadcasts); goal 5 s for 1,000,000"),
            BenchResult(
                name: "offline: data folder growth per broadcast, per offline device", unit: "B", count: 0, seconds: 0,
                value: perDevice(median(storeGrowth)),
                note: "\(String(format: "%.1f", Double(median(storeGrowth)) / 1_048_576)) MB for \(scale), median of \(broadcasts) (\(storeGrowth.map { String(format: "%.0f", Double($0) / 1_048_576) }.joined(separator: ", ")) MB); goal 16 MB for 1,000,000"),
            BenchResult(
                name: "offline: dispatcher memory growth per broadcast, per offline device", unit: "B", count: 0, seconds: 0,
                value: perDevice(memoryGrowth.max() ?? 0),
                note: "\(String(format: "%.1f", Double(memoryGrowth.max() ?? 0) / 1_048_576)) MB for \(scale), the largest of \(broadcasts) (the first: later ones reuse what it freed, median \(String(format: "%.1f", Double(median(memoryGrowth)) / 1_048_576)) MB); goal 32 MB for 1,000,000"),
        ]
    }

    /// The same import with the stores on a throwaway PostgreSQL server (`Tests/Support/pgserver.py`).
    static func importOnPostgres(devices: Int) throws -> [BenchResult] {
        let server = try ChildScript.start(
            [try RepositoryFile.locate("Tests/Support/pgserver.py"), "serve"], what: "a throwaway PostgreSQL server", timeout: 60
        ) { $0.hasPrefix("postgresql://") }
        defer { server.stop() }
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        cluster.environment["NH_STORE"] = try PostgresConnection.createDatabase(on: server.line, prefix: "nh_bench_")
        try cluster.startServices()
        return importResults(
            try importOffline(cluster, count: devices), devices: devices, store: ", PostgreSQL", note: "stores on a throwaway server with fsync off")
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
