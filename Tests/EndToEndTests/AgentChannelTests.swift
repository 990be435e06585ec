import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Testing

/// The agent channel at scale and under attack, through the real services.
@Suite("Agent channel", .serialized)
struct AgentChannelTests {
    static let services = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish"]

    static func cluster(heartbeatMs: String = "200") throws -> ServiceCluster {
        let cluster = try ServiceCluster()
        cluster.environment["NH_HEARTBEAT_MS"] = heartbeatMs
        for service in services { try cluster.start(service) }
        for service in services { try cluster.waitHealthy(service) }
        return cluster
    }

    @Test("2,000 simulated agents get two broadcasts: each delivery acknowledged exactly once, no session dropped, all counted")
    func broadcastToTwoThousand() throws {
        let agents = 2_000
        // A service heartbeat of a second, as deployed. A resend waits six agent heartbeats (at most
        // 30 s), far longer than any acknowledgement here takes.
        let cluster = try Self.cluster(heartbeatMs: "1000")
        defer { cluster.stopAll() }
        let fleet = try Fleet(cluster: cluster, count: agents)
        defer { fleet.stop() }
        #expect(fleet.wait("registered", timeout: 240), "the fleet registered its installations")
        #expect(cluster.waitUntil(timeout: 60) { (try? cluster.health("nh-dispatch").details?["installations"]) == String(agents) })
        fleet.connect()
        #expect(fleet.wait("welcomed", timeout: 120), "every agent was welcomed")
        #expect(cluster.waitUntil(timeout: 30) { (try? cluster.health("nh-dispatch").details?["agents"]) == String(agents) })

        let publish = try cluster.client(cluster.endpoint("nh-publish"))
        let dispatch = try cluster.client(cluster.endpoint("nh-dispatch"))
        var ids: [String] = []
        for round in 0..<2 {
            let accepted = try publish.call(SendNotification(format: .template, properties: ["m": "round \(round)"], tagExpression: "fanout"))
            ids.append(accepted.notificationId)
        }
        for id in ids {
            let done = cluster.waitUntil(timeout: 120) { (try? dispatch.call(OutcomeRequest(notificationId: id)).acknowledged) == agents }
            #expect(done, "notification \(id) acknowledged by every agent")
            let outcome = try dispatch.call(OutcomeRequest(notificationId: id))
            #expect(outcome.targets == agents)
            #expect(outcome.delivered == agents)
            #expect(outcome.acknowledged == agents)
            #expect(outcome.failed == 0)
        }
        #expect(cluster.waitUntil(timeout: 30) { fleet.stat("received") == 2 * agents })
        #expect(fleet.stat("duplicates") == 0, "no agent saw a delivery twice")
        #expect(fleet.stat("acked") == 2 * agents, "each delivery acknowledged exactly once")
        #expect(fleet.stat("errors") == 0)
        let details = try cluster.health("nh-dispatch").details ?? [:]
        #expect(details["agents"] == String(agents))
        let ended = details.filter { $0.key.hasPrefix("sessionsEnded") && $0.key.hasSuffix("Total") }
        #expect(ended.count >= 6, "health counts sessions ended for each reason: \(ended.keys.sorted())")
        for (name, count) in ended { #expect(count == "0", "no session ended: \(name)") }
        #expect(details["resentTotal"] == "0", "a healthy run has no resends")
        #expect(details["pendingDeliveries"] == "0")
    }

    @Test("an impostor with another key is refused at hello and at upsert; the real agent keeps receiving; a Manage key can rebind")
    func impostorRefused() throws {
        let cluster = try Self.cluster()
        defer { cluster.stopAll() }
        let serverKey = try #require(BusKeys.publicKey(directory: cluster.dataDirectory))
        let registry = try cluster.client(cluster.endpoint("nh-registry"), keyName: AccessKey.defaultListenName)
        let manage = try cluster.client(cluster.endpoint("nh-registry"))
        let publish = try cluster.client(cluster.endpoint("nh-publish"))
        let real = try CurveKeyPair.generate()
        let impostor = try CurveKeyPair.generate()
        func installation(_ key: CurveKeyPair) -> Installation {
            Installation(installationId: "device-1", platform: "linux", pushChannel: key.publicKey, tags: ["World"])
        }
        _ = try registry.call(InstallationUpsert(installation: installation(real)))
        // The dispatcher learns of it from the registry's change stream.
        #expect(cluster.waitUntil { (try? cluster.health("nh-dispatch").details?["installations"]) == "1" })
        let realAgent = try RawAgent(endpoint: cluster.environment["NH_DISPATCH_AGENTS"]!, keys: real, serverKey: serverKey)
        defer { realAgent.close() }
        #expect(realAgent.hello("device-1") == .welcome(AgentWelcome(installationId: "device-1", pending: 0)))

        // The listen key cannot move the installation to another key.
        #expect(errorCode { try registry.call(InstallationUpsert(installation: installation(impostor))) } == .forbidden)
        let patch = InstallationPatch(
            installationId: "device-1", operations: [PatchOperation(op: "replace", path: "/pushChannel", value: .string(impostor.publicKey))])
        #expect(errorCode { try registry.call(patch) } == .forbidden)

        // A hello for it from another key is refused, and the session stays with the real agent.
        let fake = try RawAgent(endpoint: cluster.environment["NH_DISPATCH_AGENTS"]!, keys: impostor, serverKey: serverKey)
        defer { fake.close() }
        guard case .error(let refusal) = fake.hello("device-1") else {
            Issue.record("the impostor's hello was not refused")
            return
        }
        #expect(refusal.code == .forbidden)
        #expect(refusal.message.contains("bound to another device key"))

        let accepted = try publish.call(SendNotification(format: .native, body: #"{"message":"for the real one"}"#, installationId: "device-1"))
        guard case .deliver(let delivery) = realAgent.next(timeout: 10) else {
            Issue.record("the real agent got no delivery")
            return
        }
        #expect(delivery.notificationId == accepted.notificationId)
        #expect(fake.next(timeout: 1) == nil, "the impostor receives nothing")

        // A Manage key rebinds the installation, for a device that lost its key: the old session ends.
        _ = try manage.call(InstallationUpsert(installation: installation(impostor)))
        guard case .error(let ended) = realAgent.next(timeout: 10) else {
            Issue.record("the old key's session did not end")
            return
        }
        #expect(ended.code == .forbidden)
        // The rebound device is welcomed and gets what was never acknowledged.
        #expect(fake.hello("device-1") == .welcome(AgentWelcome(installationId: "device-1", pending: 1)))
        guard case .deliver(let again) = fake.next(timeout: 10) else {
            Issue.record("the rebound device got no delivery")
            return
        }
        #expect(again.notificationId == accepted.notificationId)
    }
}

/// A bare agent connection speaking the compact frames, for tests that need to act as an agent would not.
final class RawAgent {
    let socket: ZMQSocket

    init(endpoint: String, keys: CurveKeyPair, serverKey: String) throws {
        socket = try ZMQContext.shared.socket(.dealer)
        try socket.setLinger(0)
        try socket.makeCurveClient(keys, serverPublicKey: serverKey)
        try socket.connect(endpoint)
    }

    /// Says hello and returns the answer, waiting up to 10 s for one.
    func hello(_ installationId: String) -> AgentFrame? {
        _ = try? socket.send(AgentWire.encode(.hello(AgentHello(installationId: installationId))))
        return next(timeout: 10)
    }

    func next(timeout: TimeInterval) -> AgentFrame? {
        try? socket.setReceiveTimeout(Int(timeout * 1000))
        guard let frames = try? socket.receive(), frames.count == 1 else { return nil }
        return try? AgentWire.decode(frames[0])
    }

    func close() { socket.close() }
}

/// `nh-bench fleet`: simulated agents in one process, reporting JSON lines.
final class Fleet {
    let process = Process()
    let input = Pipe()
    let output: URL

    init(cluster: ServiceCluster, count: Int) throws {
        output = cluster.dataDirectory.appendingPathComponent("fleet.jsonl")
        guard FileManager.default.createFile(atPath: output.path, contents: nil) else { throw HubError(.internal, "cannot write \(output.path)") }
        process.executableURL = ServiceCluster.binDirectory.appendingPathComponent("nh-bench")
        process.arguments = ["fleet", "--count", String(count), "--prefix", "f", "--tag", "fanout"]
        process.environment = cluster.environment
        process.standardInput = input
        let log = cluster.logFile("fleet")
        guard FileManager.default.createFile(atPath: log.path, contents: nil) else { throw HubError(.internal, "cannot write \(log.path)") }
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = try FileHandle(forWritingTo: log)
        try process.run()
    }

    func events() -> [[String: Any]] { jsonLines(output) }

    func wait(_ event: String, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if events().contains(where: { $0["event"] as? String == event }) { return true }
            if !process.isRunning { return false }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return false
    }

    /// The latest figure the fleet reported.
    func stat(_ name: String) -> Int {
        events().last { $0["event"] as? String == "stats" }?[name] as? Int ?? 0
    }

    func connect() { input.fileHandleForWriting.write(Data("connect\n".utf8)) }

    func stop() {
        try? input.fileHandleForWriting.close()
        let deadline = Date().addingTimeInterval(15)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}
