import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Synchronization

/// The real services, started from the folder nh-bench runs from, on free loopback ports with a
/// temporary data folder; and agents whose output lines are timestamped as they arrive.
final class HubCluster {
    let binDirectory: URL
    let dataDirectory: URL
    var environment: [String: String]
    /// How this process's sockets reach the cluster's CURVE bus, once `secureBus` has read the keys.
    private(set) var bus: BusSecurity?
    /// Executables started through another command, such as one under valgrind: name → the
    /// command for the executable's path. A service run that way answers far slower, so health
    /// waits longer for it.
    var wrappers: [String: (String) throws -> [String]] = [:]
    private var processes: [Process] = []
    private var named: [String: Process] = [:]

    init() throws {
        binDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("nh-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
        environment = try LoopbackEnvironment.make(dataDirectory: dataDirectory, logLevel: "warning")
    }

    static func freeEndpoint() throws -> String { try LoopbackEnvironment.freeEndpoint() }

    func start(_ executable: String, environment extra: [String: String] = [:], output: Pipe? = nil) throws -> Process {
        let process = Process()
        process.executableURL = binDirectory.appendingPathComponent(executable)
        if let wrapper = wrappers[executable] {
            let command = try wrapper(binDirectory.appendingPathComponent(executable).path)
            guard let program = command.first else { throw BenchError("no command to start \(executable) with") }
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = Array(command.dropFirst())
        }
        process.environment = environment.merging(extra) { $1 }
        process.standardOutput = output ?? FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        processes.append(process)
        named[executable] = process
        return process
    }

    /// The process started from `executable`, the latest if several.
    func process(_ executable: String) -> Process? { named[executable] }

    /// Ends `process` with the cluster.
    func adopt(_ process: Process) { processes.append(process) }

    func startServices() throws {
        for service in ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish"] { _ = try start(service) }
        for variable in ["NH_REGISTRY_REQUESTS", "NH_SYNC_REQUESTS", "NH_DISPATCH_REQUESTS", "NH_PUBLISH_REQUESTS"] {
            try waitHealthy(environment[variable]!)
        }
    }

    /// Connects this process to the cluster's CURVE bus with the full key, once the services have
    /// made their key files.
    func secureBus() throws {
        let deadline = Date().addingTimeInterval(30)
        while BusKeys.publicKey(directory: dataDirectory) == nil || (try? KeyStore.load(directory: dataDirectory)) == nil {
            guard Date() < deadline else { throw ConfigError("the services made no key files in \(dataDirectory.path)") }
            Thread.sleep(forTimeInterval: 0.05)
        }
        bus = BusSecurity(
            serverKeys: nil, clientKeys: try BusSecurity.clientKeys(for: try credential()),
            serverPublicKey: BusKeys.publicKey(directory: dataDirectory)!, admitted: [])
    }

    /// Asks for health until the service answers; an agent's control socket, with `agentHome`,
    /// is served with the device key kept there.
    @discardableResult
    func waitHealthy(_ endpoint: String, agentHome: URL? = nil) throws -> HealthReply {
        try secureBus()
        let slow = !wrappers.isEmpty
        let deadline = Date().addingTimeInterval(slow ? 300 : 30)
        while true {
            do {
                var curve = bus?.client
                if let agentHome, let keys = curve?.keys {
                    guard let device = BusKeys.deviceKey(agentHome: agentHome) else { throw HubError(.unavailable, "no device key yet") }
                    curve = (keys, device)
                }
                let client = try HubClient(connect: endpoint, policy: RetryPolicy(timeout: slow ? 10_000 : 300, attempts: 1), curve: curve)
                defer { client.close() }
                return try client.call(HealthRequest())
            } catch {
                if Date() > deadline { throw error }
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
    }

    /// A client that signs with the full key the services made.
    func client(_ variable: String) throws -> HubClient {
        try Self.client(environment[variable]!, credential: try credential(), bus: bus)
    }

    func credential() throws -> ConnectionString {
        let key = try KeyStore.loadOrCreate(directory: dataDirectory).key(named: AccessKey.defaultFullName)!
        return ConnectionString(endpoint: "http://127.0.0.1:7780/", keyName: key.name, key: key.key)
    }

    /// A client signing with `credential`, on the bus as `bus` secures it (a cluster's `bus`).
    static func client(_ endpoint: String, credential: ConnectionString, bus: BusSecurity?) throws -> HubClient {
        try HubClient(
            connect: endpoint, policy: RetryPolicy(timeout: 10_000, attempts: 1), curve: bus?.client,
            auth: { credential.token(for: "http://127.0.0.1:7780/hub") })
    }

    func stopAll() {
        for process in processes where process.isRunning { process.terminate() }
        for process in processes { process.waitUntilExit() }
        processes.removeAll()
        try? FileManager.default.removeItem(at: dataDirectory)
    }
}

/// Reads an agent's JSON lines on a thread of its own and notes when each (event, id) arrived.
final class AgentWatcher: @unchecked Sendable {
    private let condition = NSCondition()
    private var seen: [String: ContinuousClock.Instant] = [:]
    private var counts: [String: Int] = [:]
    let pipe = Pipe()

    func start() {
        JSONLines.read(pipe.fileHandleForReading, line: { [self] object in
            guard let event = object["event"] as? String else { return }
            let key = "\(event) \(object["id"] as? String ?? "")"
            condition.lock()
            seen[key] = seen[key] ?? .now
            counts[event, default: 0] += 1
            condition.broadcast()
            condition.unlock()
        })
    }

    /// When `event` for `id` arrived, waiting at most `timeout` seconds for it.
    func wait(_ event: String, _ id: String, timeout: TimeInterval = 10) -> ContinuousClock.Instant? {
        let key = "\(event) \(id)"
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while seen[key] == nil {
            if !condition.wait(until: deadline) { return nil }
        }
        return seen[key]
    }

    func wait(count: Int, of event: String, timeout: TimeInterval = 60) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while counts[event, default: 0] < count {
            if !condition.wait(until: deadline) { return false }
        }
        return true
    }
}
