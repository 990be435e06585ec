import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Testing

/// The promises that hold under faults and hostile clients, against the real services.
@Suite("Hardening", .serialized)
struct HardeningTests {
    static let backend = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish"]

    static func cluster(_ services: [String] = backend, environment: [String: String] = [:]) throws -> ServiceCluster {
        let cluster = try ServiceCluster()
        cluster.environment.merge(environment) { $1 }
        for service in services { try cluster.start(service) }
        for service in services { try cluster.waitHealthy(service) }
        return cluster
    }

    static func send(_ text: String) -> SendNotification {
        SendNotification(format: .template, properties: ["messageParam": text], tagExpression: "World")
    }

    // MARK: Full disk

    @Test("a full disk: sends and posts fail with a clear error, the services stay up, nothing accepted is lost, and they accept again once there is room")
    func fullDisk() throws {
        let cluster = try ServiceCluster()
        let mount = cluster.dataDirectory
        let mounted = Process()
        mounted.executableURL = URL(fileURLWithPath: "/bin/mount")
        mounted.arguments = ["-t", "tmpfs", "-o", "size=48m", "tmpfs", mount.path]
        try mounted.run()
        mounted.waitUntilExit()
        try #require(mounted.terminationStatus == 0, "the test mounts a small tmpfs for the data folder; it needs root")
        defer {
            cluster.stopAll()
            let unmount = Process()
            unmount.executableURL = URL(fileURLWithPath: "/bin/umount")
            unmount.arguments = [mount.path]
            try? unmount.run()
            unmount.waitUntilExit()
        }
        for service in Self.backend { try cluster.start(service) }
        for service in Self.backend { try cluster.waitHealthy(service) }
        let publish = try cluster.client(cluster.endpoint("nh-publish"))
        var accepted: [String] = []
        var posted: [String] = []
        for index in 0..<20 {
            accepted.append(try publish.call(Self.send("before \(index)")).notificationId)
        }
        _ = try publish.call(PostUserNotification(userId: "alice", appNotificationId: "before", raw: "r"))
        posted.append("before")

        // Fill the file system to the last byte.
        let filler = mount.appendingPathComponent("filler")
        _ = FileManager.default.createFile(atPath: filler.path, contents: nil)
        let handle = try FileHandle(forWritingTo: filler)
        let chunk = Data(repeating: 0x5a, count: 1 << 16)
        var filled = 0
        while filled < 64 << 20 {
            do { try handle.write(contentsOf: chunk) } catch { break }
            filled += chunk.count
        }
        try? handle.close()

        // Sends are refused with a clear error; one may still fit in space SQLite had already taken.
        var refusals: [HubError] = []
        for index in 0..<200 where refusals.count < 5 {
            do {
                accepted.append(try publish.call(Self.send("during \(index)")).notificationId)
            } catch let error as HubError {
                refusals.append(error)
            }
        }
        #expect(refusals.count == 5, "sends were refused once the disk was full")
        for refusal in refusals {
            #expect(refusal.code == .unavailable, "\(refusal)")
            #expect(refusal.message.contains("full"), "\(refusal.message)")
        }
        var postRefused: HubError?
        for index in 0..<50 where postRefused == nil {
            do {
                _ = try publish.call(PostUserNotification(userId: "alice", appNotificationId: "during-\(index)", raw: "r"))
                posted.append("during-\(index)")
            } catch let error as HubError {
                postRefused = error
            }
        }
        #expect(postRefused?.code == .unavailable, "\(String(describing: postRefused))")
        for service in Self.backend {
            #expect(try cluster.health(service).status == "ok", "\(service) answers on a full disk")
        }

        // Room again: accepted at once, with no restart.
        try FileManager.default.removeItem(at: filler)
        #expect(cluster.waitUntil(timeout: 10) {
            guard let id = try? publish.call(Self.send("after")).notificationId else { return false }
            accepted.append(id)
            return true
        }, "a send is accepted again once there is room")
        _ = try publish.call(PostUserNotification(userId: "alice", appNotificationId: "after", raw: "r"))
        posted.append("after")

        // Nothing accepted was lost, before or after a restart of the stores' services.
        for service in ["nh-publish", "nh-sync"] {
            #expect(cluster.stop(service) == 0)
            try cluster.start(service)
            try cluster.waitHealthy(service)
        }
        let again = try cluster.client(cluster.endpoint("nh-publish"))
        for id in accepted {
            #expect(errorCode { try again.call(OutcomeRequest(notificationId: id)) } == nil, "accepted \(id) is still there")
        }
        let sync = try cluster.client(cluster.endpoint("nh-sync"))
        let credential = try sync.call(IssueUserCredential(userId: "alice")).credential
        let token = try sync.call(UserTokenRequest(credential: credential)).token
        let history = try sync.call(UserHistoryRequest(), auth: token)
        let ids = Set(history.notifications.map(\.appNotificationId))
        for id in posted { #expect(ids.contains(id), "posted \(id) is still there") }
    }

    // MARK: Authorization

    @Test("the authorization matrix on the bus: a listen key cannot send, list, enroll or snapshot, nor claim a user; expired and forged tokens are refused")
    func authorizationMatrix() throws {
        let cluster = try Self.cluster()
        defer { cluster.stopAll() }
        let listenPublish = try cluster.client(cluster.endpoint("nh-publish"), keyName: AccessKey.defaultListenName)
        let listenRegistry = try cluster.client(cluster.endpoint("nh-registry"), keyName: AccessKey.defaultListenName)
        let listenSync = try cluster.client(cluster.endpoint("nh-sync"), keyName: AccessKey.defaultListenName)
        let fullSync = try cluster.client(cluster.endpoint("nh-sync"))

        #expect(errorCode { try listenPublish.call(Self.send("no")) } == .forbidden)
        #expect(errorCode { try listenPublish.call(PostUserNotification(userId: "alice", appNotificationId: "x", raw: "r")) } == .forbidden)
        #expect(errorCode { try listenPublish.call(PendingNotificationsRequest(after: 0)) } == .unauthorized)
        #expect(errorCode { try listenRegistry.call(InstallationList()) } == .forbidden)
        #expect(errorCode { try listenRegistry.call(RegistrySnapshotRequest()) } == .unauthorized)
        #expect(errorCode { try listenSync.call(IssueUserCredential(userId: "alice")) } == .forbidden)

        // Claiming a user needs that user's token, or Manage.
        let key = try CurveKeyPair.generate()
        let claim = Installation(installationId: "claimer", platform: "linux", pushChannel: key.publicKey, tags: ["World"], userId: "alice")
        #expect(errorCode { try listenRegistry.call(InstallationUpsert(installation: claim)) } == .forbidden)
        let bob = try fullSync.call(UserTokenRequest(credential: try fullSync.call(IssueUserCredential(userId: "bob")).credential)).token
        #expect(errorCode { try listenRegistry.call(InstallationUpsert(installation: claim, userToken: bob)) } == .forbidden)
        let patch = InstallationPatch(installationId: "claimer", operations: [PatchOperation(op: "add", path: "/userId", value: .string("alice"))])
        var unclaimed = claim
        unclaimed.userId = nil
        _ = try listenRegistry.call(InstallationUpsert(installation: unclaimed))
        #expect(errorCode { try listenRegistry.call(patch) } == .forbidden)
        let alice = try fullSync.call(UserTokenRequest(credential: try fullSync.call(IssueUserCredential(userId: "alice")).credential)).token
        #expect(errorCode { try listenRegistry.call(InstallationUpsert(installation: claim, userToken: alice)) } == nil)
        #expect(try listenRegistry.call(InstallationGet(installationId: "claimer")).installation.userId == "alice")

        // Expired, forged and unknown credentials.
        let keys = try cluster.keys()
        let full = try #require(keys.key(named: AccessKey.defaultFullName))
        let resource = "http://127.0.0.1:7780/hub"
        let expired = SharedAccessSignature.sign(resource: resource, keyName: full.name, key: full.key, expiry: Int(Date().timeIntervalSince1970) - 10)
        let forged = SharedAccessSignature.sign(
            resource: resource, keyName: full.name, key: Crypto.randomBytes(32).base64EncodedString(), expiry: Int(Date().timeIntervalSince1970) + 600)
        let unknown = SharedAccessSignature.sign(resource: resource, keyName: "nobody", key: full.key, expiry: Int(Date().timeIntervalSince1970) + 600)
        for token in [expired, forged, unknown, "SharedAccessSignature garbage", ""] {
            #expect(errorCode { try listenPublish.call(Self.send("x"), auth: token) } == .unauthorized, "\(token)")
            #expect(errorCode { try listenRegistry.call(InstallationList(), auth: token) } == .unauthorized, "\(token)")
        }
        #expect(errorCode { try fullSync.call(UserHistoryRequest(), auth: "nhu1.forged.token") } == .unauthorized)
    }

    @Test("an unknown peer reaches no socket: without CURVE, with another server key, or with a key derived from no key of the hub")
    func unknownPeers() throws {
        let cluster = try Self.cluster(Self.backend + ["nh-gateway"])
        defer { cluster.stopAll() }
        let admitted = try cluster.curve()
        let strangers: [(String, (keys: CurveKeyPair, serverPublicKey: String)?)] = [
            ("no CURVE", nil),
            ("another server key", (admitted.keys, try CurveKeyPair.generate().publicKey)),
            ("an unknown client key", (try CurveKeyPair.generate(), admitted.serverPublicKey)),
        ]
        for variable in ["NH_REGISTRY_REQUESTS", "NH_SYNC_REQUESTS", "NH_DISPATCH_REQUESTS", "NH_PUBLISH_REQUESTS", "NH_GATEWAY_REQUESTS"] {
            let endpoint = cluster.environment[variable]!
            for (name, curve) in strangers {
                let client = try RequestClient(connect: endpoint, policy: RetryPolicy(timeout: 400, attempts: 1), curve: curve)
                #expect(throws: BusError.self, "\(variable) answered a peer with \(name)") {
                    try client.request([HubCodec.encode(HealthRequest(), id: "stranger")])
                }
                client.close()
            }
            let known = try RequestClient(connect: endpoint, policy: RetryPolicy(timeout: 3_000, attempts: 1), curve: admitted)
            #expect(try HubCodec.decodeReply(HealthReply.self, from: known.request([HubCodec.encode(HealthRequest(), id: "k")])[0]).payload.status == "ok")
            known.close()
        }
        // Change streams: an admitted subscriber hears the heartbeat; strangers hear nothing.
        for variable in ["NH_REGISTRY_EVENTS", "NH_SYNC_EVENTS", "NH_PUBLISH_EVENTS"] {
            let endpoint = cluster.environment[variable]!
            func heard(_ curve: (keys: CurveKeyPair, serverPublicKey: String)?) throws -> Bool {
                let socket = try ZMQContext.shared.socket(.sub)
                defer { socket.close() }
                try socket.setReceiveTimeout(1_500)
                if let curve { try socket.makeCurveClient(curve.keys, serverPublicKey: curve.serverPublicKey) }
                try socket.subscribe()
                try socket.connect(endpoint)
                return try socket.receive() != nil
            }
            #expect(try heard(admitted), "\(variable) to an admitted subscriber")
            for (name, curve) in strangers {
                #expect(try !heard(curve), "\(variable) to a subscriber with \(name)")
            }
        }
        for service in Self.backend + ["nh-gateway"] {
            #expect(try cluster.health(service).status == "ok", "\(service) after strangers")
        }
        let details = try cluster.health("nh-dispatch").details ?? [:]
        #expect(Int(details["zapRefusedTotal"] ?? "0") ?? 0 > 0, "the dispatcher counted its refusals")
    }

    @Test("a key's request rate is limited when configured, the listen key per connection; Manage keys are not")
    func keyRate() throws {
        let cluster = try Self.cluster(["nh-registry"], environment: ["NH_LIMITS_REQUESTS_PER_SECOND_PER_KEY": "5"])
        defer { cluster.stopAll() }
        let listen = try cluster.client(cluster.endpoint("nh-registry"), keyName: AccessKey.defaultListenName)
        let manage = try cluster.client(cluster.endpoint("nh-registry"))
        var codes: [ErrorCode?] = []
        for _ in 0..<40 { codes.append(errorCode { try listen.call(InstallationGet(installationId: "none")) }) }
        #expect(codes.contains(.notFound), "the first requests are served")
        #expect(codes.contains(.rateLimited), "requests beyond the burst are refused")
        // The listen key is every device's, so each connection has a rate of its own.
        let device = try cluster.client(cluster.endpoint("nh-registry"), keyName: AccessKey.defaultListenName)
        #expect(errorCode { try device.call(InstallationGet(installationId: "none")) } == .notFound)
        for _ in 0..<40 {
            #expect(errorCode { try manage.call(InstallationGet(installationId: "none")) } == .notFound)
        }
    }

    @Test("an agent over its message rate gets rate_limited, and beyond limits.agents a new agent is refused with unavailable")
    func agentLimits() throws {
        let cluster = try Self.cluster(
            ["nh-registry", "nh-dispatch"], environment: ["NH_LIMITS_AGENT_MESSAGES_PER_SECOND": "5", "NH_LIMITS_AGENTS": "1"])
        defer { cluster.stopAll() }
        let registry = try cluster.client(cluster.endpoint("nh-registry"))
        let serverKey = try #require(BusKeys.publicKey(directory: cluster.dataDirectory))
        let first = try CurveKeyPair.generate(), second = try CurveKeyPair.generate()
        for (id, key) in [("one", first), ("two", second)] {
            _ = try registry.call(InstallationUpsert(installation: Installation(installationId: id, platform: "linux", pushChannel: key.publicKey)))
        }
        #expect(cluster.waitUntil { (try? cluster.health("nh-dispatch").details?["installations"]) == "2" })
        let agent = try RawAgent(endpoint: cluster.environment["NH_DISPATCH_AGENTS"]!, keys: first, serverKey: serverKey)
        defer { agent.close() }
        #expect(agent.hello("one") == .welcome(AgentWelcome(installationId: "one", pending: 0)))
        let other = try RawAgent(endpoint: cluster.environment["NH_DISPATCH_AGENTS"]!, keys: second, serverKey: serverKey)
        defer { other.close() }
        guard case .error(let full) = other.hello("two") else {
            Issue.record("a second agent beyond limits.agents was let in")
            return
        }
        #expect(full.code == .unavailable && full.message.contains("limits.agents"))
        // A flood of hellos: beyond the burst, each is answered with rate_limited.
        for _ in 0..<40 { _ = try agent.socket.send(AgentWire.encode(.hello(AgentHello(installationId: "one")))) }
        var limited = 0
        while case .error(let error)? = agent.next(timeout: 2) { if error.code == .rateLimited { limited += 1 } }
        #expect(limited > 0, "messages beyond the rate were refused")
        #expect(try cluster.health("nh-dispatch").status == "ok")
    }

    // MARK: Start and the agent's commands

    @Test("a key file that exists but cannot be parsed stops the service at start, and is left as it was")
    func unreadableKeys() throws {
        for file in ["keys.json", "user-token.key", "bus.key"] {
            let cluster = try ServiceCluster()
            defer { cluster.stopAll() }
            let url = cluster.dataDirectory.appendingPathComponent(file)
            try Data("not a key file".utf8).write(to: url)
            let process = try cluster.start("nh-registry")
            #expect(cluster.waitUntil(timeout: 10) { !process.isRunning }, "nh-registry stops with a bad \(file)")
            #expect(process.terminationStatus == 2)
            #expect(cluster.log("nh-registry").contains(file), "the message names \(file):\n\(cluster.log("nh-registry"))")
            #expect(try Data(contentsOf: url) == Data("not a key file".utf8), "\(file) is left as it was")
        }
    }

    @Test("nh-agent subscribe reports the registry's refusal and keeps the categories in force")
    func subscribeRefused() throws {
        let cluster = try Self.cluster(["nh-registry", "nh-dispatch"])
        defer { cluster.stopAll() }
        try cluster.start("nh-agent")
        try cluster.waitHealthy("nh-agent", endpoint: cluster.environment["NH_AGENT_REQUESTS"]!)
        let first = try cluster.runTool("nh-agent", ["subscribe", "World", "Sports"])
        #expect(first.status == 0, "\(first.error)")
        #expect(first.output.contains("registered again"))
        // The command is told a higher limit than the registry keeps, so the registry refuses.
        let many = (0..<61).map { "c\($0)" }
        let refused = try cluster.runTool("nh-agent", ["subscribe"] + many, environment: ["NH_LIMITS_TAGS_PER_INSTALLATION": "100"])
        #expect(refused.status != 0)
        #expect(refused.error.contains("invalid_tag") && refused.error.contains("at most 60"), "\(refused.error)")
        #expect(!refused.output.contains("registered again"))
        let categories = try cluster.runTool("nh-agent", ["categories"])
        #expect(categories.output.split(separator: "\n") == ["World", "Sports"])
        let registry = try cluster.client(cluster.endpoint("nh-registry"))
        let id = try cluster.runTool("nh-agent", ["id"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try registry.call(InstallationGet(installationId: id)).installation.tags == ["World", "Sports"])
        // Over the agent's own limit, the command refuses before asking anyone.
        let local = try cluster.runTool("nh-agent", ["subscribe"] + many)
        #expect(local.status == 2)
        #expect(local.error.contains("at most 60"))
    }
}
