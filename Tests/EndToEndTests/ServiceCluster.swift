import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Testing

/// Real service executables on free loopback ports with a temporary data folder, for one test.
/// Every process it starts, it ends.
final class ServiceCluster {
    static let services = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish", "nh-agent", "nh-gateway"]

    let dataDirectory: URL
    var environment: [String: String]
    private(set) var processes: [String: Process] = [:]

    init() throws {
        dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("nh-e2e-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
        environment = try LoopbackEnvironment.make(dataDirectory: dataDirectory, logLevel: "debug")
        environment["NH_GATEWAY_LISTEN"] = "127.0.0.1:\(try Self.freeTCPPort())"
        environment["NH_HEARTBEAT_MS"] = "200"
    }

    deinit { stopAll() }

    /// The folder that holds the built executables.
    static let binDirectory: URL = {
        if let explicit = ProcessInfo.processInfo.environment["NH_BIN_DIR"] {
            return URL(fileURLWithPath: explicit)
        }
        let runner = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for candidate in [runner, runner.deletingLastPathComponent()]
        where FileManager.default.isExecutableFile(atPath: candidate.appendingPathComponent("nh-registry").path) {
            return candidate
        }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug")
    }()

    static func freeEndpoint() throws -> String { try LoopbackEnvironment.freeEndpoint() }

    static func freeTCPPort() throws -> Int {
        Int(try freeEndpoint().split(separator: ":").last ?? "0") ?? 0
    }

    /// The request endpoint of a service.
    func endpoint(_ service: String) -> String {
        let variable = service == "nh-sync" ? "NH_SYNC_REQUESTS"
            : "NH_" + service.dropFirst(3).uppercased() + "_REQUESTS"
        return environment[variable]!
    }

    func logFile(_ service: String) -> URL { dataDirectory.appendingPathComponent("\(service).log") }

    func log(_ service: String) -> String {
        (try? String(contentsOf: logFile(service), encoding: .utf8)) ?? ""
    }

    /// Runs an executable to completion and returns its exit status and output.
    func runTool(_ name: String, _ arguments: [String], environment extra: [String: String] = [:], timeout: TimeInterval = 30)
        throws -> (status: Int32, output: String, error: String)
    {
        let process = Process()
        process.executableURL = Self.binDirectory.appendingPathComponent(name)
        process.arguments = arguments
        process.environment = environment.merging(extra) { $1 }
        let out = dataDirectory.appendingPathComponent("\(name)-\(UUID().uuidString).out")
        let err = dataDirectory.appendingPathComponent("\(name)-\(UUID().uuidString).err")
        FileManager.default.createFile(atPath: out.path, contents: nil)
        FileManager.default.createFile(atPath: err.path, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        try process.run()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            Issue.record("\(name) \(arguments) did not finish within \(timeout) s")
        }
        return (
            process.terminationStatus, (try? String(contentsOf: out, encoding: .utf8)) ?? "",
            (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        )
    }

    /// Starts a service in the background, its standard error going to its log file.
    @discardableResult
    func start(
        _ service: String, as name: String? = nil, arguments: [String] = [], environment extra: [String: String] = [:],
        stdout: URL? = nil
    ) throws -> Process {
        let name = name ?? service
        let process = Process()
        process.executableURL = Self.binDirectory.appendingPathComponent(service)
        process.arguments = arguments
        process.environment = environment.merging(extra) { $1 }
        for file in [logFile(name), stdout].compactMap({ $0 }) where !FileManager.default.fileExists(atPath: file.path) {
            FileManager.default.createFile(atPath: file.path, contents: nil)
        }
        let handle = try FileHandle(forWritingTo: logFile(name))
        handle.seekToEndOfFile()
        process.standardError = handle
        if let stdout {
            let output = try FileHandle(forWritingTo: stdout)
            output.seekToEndOfFile()
            process.standardOutput = output
        } else {
            process.standardOutput = handle
        }
        try process.run()
        processes[name] = process
        if service == "nh-agent" {
            let merged = environment.merging(extra) { $1 }
            let home = merged["NH_AGENT_HOME"] ?? dataDirectory.appendingPathComponent("agent").path
            agentHomes[merged["NH_AGENT_REQUESTS"] ?? ""] = URL(fileURLWithPath: home, isDirectory: true)
        }
        return process
    }

    /// Each agent's home, by its control endpoint: its device key there serves that socket.
    private var agentHomes: [String: URL] = [:]

    /// The CURVE settings of a client holding the named key: every bus socket is CURVE, and a
    /// client's keys are derived from its access key. Waits for the services to make the key files.
    func curve(keyName: String = AccessKey.defaultFullName) throws -> (keys: CurveKeyPair, serverPublicKey: String) {
        let deadline = Date().addingTimeInterval(20)
        while BusKeys.publicKey(directory: dataDirectory) == nil || (try? KeyStore.load(directory: dataDirectory)) == nil {
            guard Date() < deadline else { throw HubError(.unavailable, "the services made no key files in \(dataDirectory.path)") }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let key = try #require(try keys().key(named: keyName))
        return (try BusSecurity.clientKeys(keyName: key.name, key: key.key), BusKeys.publicKey(directory: dataDirectory)!)
    }

    /// The CURVE settings for an agent's control socket: the full key's client keys, the agent's device key.
    func agentCurve(_ endpoint: String) throws -> (keys: CurveKeyPair, serverPublicKey: String) {
        let home = agentHomes[endpoint] ?? dataDirectory.appendingPathComponent("agent")
        let deadline = Date().addingTimeInterval(20)
        while BusKeys.deviceKey(agentHome: home) == nil && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        guard let device = BusKeys.deviceKey(agentHome: home) else { throw HubError(.unavailable, "no device key in \(home.path)") }
        return (try curve().keys, device)
    }

    func startAll() throws {
        for service in Self.services { try start(service) }
        for service in Self.services { try waitHealthy(service) }
    }

    /// Asks for health until the service answers, for at most `timeout` seconds.
    @discardableResult
    func waitHealthy(_ service: String, timeout: TimeInterval = 20, endpoint: String? = nil) throws -> HealthReply {
        let deadline = Date().addingTimeInterval(timeout)
        var lastError: Error?
        while Date() < deadline {
            if let process = processes[service], !process.isRunning {
                throw HubError(.unavailable, "\(service) exited with \(process.terminationStatus):\n\(log(service))")
            }
            do {
                return try health(service, timeout: 300, endpoint: endpoint)
            } catch {
                lastError = error
            }
        }
        throw HubError(.timeout, "\(service) not healthy within \(timeout) s: \(lastError.map { "\($0)" } ?? "")\n\(log(service))")
    }

    func health(_ service: String, timeout: Int = 2_000, endpoint explicit: String? = nil) throws -> HealthReply {
        let endpoint = explicit ?? endpoint(service)
        let client = try HubClient(
            connect: endpoint, policy: RetryPolicy(timeout: timeout, attempts: 1),
            curve: service == "nh-agent" ? try agentCurve(endpoint) : try curve())
        defer { client.close() }
        return try client.call(HealthRequest())
    }

    /// Polls `condition` every 50 ms for at most `timeout` seconds; true when it held.
    @discardableResult
    func waitUntil(timeout: TimeInterval = 20, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return try condition()
    }

    /// The hub's keys, as the services made them in the data folder.
    func keys() throws -> KeyStore { try KeyStore.loadOrCreate(directory: dataDirectory) }

    /// A client of a service that signs with the named key.
    func client(_ endpoint: String, keyName: String = AccessKey.defaultFullName, timeout: Int = 3_000) throws -> HubClient {
        let key = try keys().key(named: keyName)!
        let credential = ConnectionString(endpoint: "http://127.0.0.1:7780/", keyName: key.name, key: key.key)
        return try HubClient(
            connect: endpoint, policy: RetryPolicy(timeout: timeout, attempts: 1), curve: try curve(keyName: keyName),
            auth: { credential.token(for: "http://127.0.0.1:7780/hub") })
    }

    /// Sends SIGTERM and waits, at most `timeout` seconds, for the exit status.
    func stop(_ service: String, timeout: TimeInterval = 10) -> Int32? {
        guard let process = processes.removeValue(forKey: service) else { return nil }
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return nil
        }
        return process.terminationStatus
    }

    func stopAll() {
        for service in processes.keys { _ = stop(service) }
    }
}

/// The JSON objects of a file of JSON lines, such as an agent's output.
func jsonLines(_ url: URL) -> [[String: Any]] {
    let text = (try? String(contentsOf: url, encoding: .utf8)) ?? ""
    return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
}

/// The error code a call failed with, nil when it succeeded.
func errorCode(_ body: () throws -> Any) -> ErrorCode? {
    do {
        _ = try body()
        return nil
    } catch let error as HubError {
        return error.code
    } catch {
        return .internal
    }
}
