import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Testing

/// Rich push: the payload is stored, the targets get a silent notification, fetch the payload with
/// their own credentials, and only then show the notification.
@Suite("Rich push", .serialized)
struct RichPushTests {
    struct Device {
        let name: String
        let home: URL
        let control: String
        let output: URL
        func lines() -> [[String: Any]] { jsonLines(output) }
        func rich() -> [[String: Any]] { lines().compactMap { $0["rich"] as? [String: Any] } }
        func events(_ name: String) -> [[String: Any]] { lines().filter { $0["event"] as? String == name } }
    }

    final class Hub {
        let cluster: ServiceCluster
        var devices: [String: Device] = [:]

        init() throws {
            cluster = try ServiceCluster()
            for service in ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish"] { try cluster.start(service) }
            for service in ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish"] { try cluster.waitHealthy(service) }
        }

        @discardableResult
        func start(_ name: String, user: String, extra: [String: String] = [:]) throws -> Device {
            let device = try devices[name] ?? Device(
                name: name, home: cluster.dataDirectory.appendingPathComponent("dev-\(name)"),
                control: ServiceCluster.freeEndpoint(), output: cluster.dataDirectory.appendingPathComponent("dev-\(name).jsonl"))
            devices[name] = device
            let sync = try cluster.client(cluster.endpoint("nh-sync"))
            defer { sync.close() }
            let credential = try sync.call(IssueUserCredential(userId: user)).credential
            try cluster.start(
                "nh-agent", as: "dev-\(name)",
                environment: [
                    "NH_AGENT_HOME": device.home.path, "NH_AGENT_REQUESTS": device.control, "NH_AGENT_USER_CREDENTIAL": credential,
                ]
                    .merging(extra) { $1 },
                stdout: device.output)
            try cluster.waitHealthy("nh-agent", endpoint: device.control)
            #expect(cluster.waitUntil { (try? cluster.health("nh-agent", endpoint: device.control).details?["registered"]) == "true" })
            return device
        }

        func waitForDispatcher(installations: Int, agents: Int) {
            #expect(cluster.waitUntil {
                let details = (try? cluster.health("nh-dispatch").details) ?? [:]
                return details["installations"] == String(installations) && details["agents"] == String(agents)
            })
        }

        func send(_ request: SendRichNotification, keyName: String = AccessKey.defaultFullName) throws -> RichAccepted {
            let client = try cluster.client(cluster.endpoint("nh-publish"), keyName: keyName, timeout: 10_000)
            defer { client.close() }
            return try client.call(request)
        }

        func outcome(_ id: String) -> NotificationOutcome? {
            guard let client = try? cluster.client(cluster.endpoint("nh-dispatch")) else { return nil }
            defer { client.close() }
            return try? client.call(OutcomeRequest(notificationId: id))
        }

        func richFile(_ richId: String) -> URL { cluster.dataDirectory.appendingPathComponent("rich/\(richId)") }
    }

    static func image(_ size: Int) -> Data { Crypto.randomBytes(size) }


    @Test("a 1 MiB image reaches both of a user's devices, fetched and checked before it is shown; others are refused")
    func imageToUser() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let phone = try hub.start("phone", user: "alice")
        let laptop = try hub.start("laptop", user: "alice")
        let other = try hub.start("other", user: "bob")
        hub.waitForDispatcher(installations: 3, agents: 3)

        let bytes = Self.image(1 << 20)
        let accepted = try hub.send(SendRichNotification(
            message: "New photo from Ann", richType: "image", contentType: "image/png", payload: bytes,
            sha256: Crypto.sha256(bytes).hexString, userId: "alice"))
        #expect(accepted.richId == Crypto.sha256(bytes).hexString)
        #expect(hub.cluster.waitUntil { phone.rich().count == 1 && laptop.rich().count == 1 })
        for device in [phone, laptop] {
            let rich = device.rich()[0]
            #expect(rich["message"] as? String == "New photo from Ann")
            #expect(rich["richType"] as? String == "image")
            let path = try #require(rich["path"] as? String)
            #expect(Crypto.sha256(try Data(contentsOf: URL(fileURLWithPath: path))) == Crypto.sha256(bytes))
        }
        #expect(hub.cluster.waitUntil { hub.outcome(accepted.notificationId)?.acknowledged == 2 })
        #expect(other.lines().filter { $0["event"] == nil }.isEmpty, "the other user's device shows nothing")

        // The same bytes again are stored once.
        let again = try hub.send(SendRichNotification(
            message: "Again", richType: "image", contentType: "image/png", payload: bytes, userId: "alice"))
        #expect(again.richId == accepted.richId)
        let stored = try FileManager.default.contentsOfDirectory(atPath: hub.cluster.dataDirectory.appendingPathComponent("rich").path)
            .filter { !$0.hasPrefix(".") }
        #expect(stored == [accepted.richId])

        // Not a target: no ticket, a forged one, or one for another payload.
        let listen = try hub.cluster.client(hub.cluster.endpoint("nh-publish"), keyName: AccessKey.defaultListenName)
        defer { listen.close() }
        #expect(errorCode { try listen.call(RichFetchRequest(richId: accepted.richId, ticket: "")) } == .unauthorized)
        #expect(errorCode { try listen.call(RichFetchRequest(richId: accepted.richId, ticket: "nhu1.e30.c2ln")) } == .unauthorized)
        let forged = UserTokens(secret: Data(repeating: 3, count: 32)).issue(user: "x", kind: .ticket, lifetime: 60, resource: accepted.richId)
        #expect(errorCode { try listen.call(RichFetchRequest(richId: accepted.richId, ticket: forged.token)) } == .unauthorized)
        let secret = try UserTokens.loadOrCreate(directory: hub.cluster.dataDirectory)
        let elsewhere = secret.issue(user: "x", kind: .ticket, lifetime: 60, resource: "0000")
        #expect(errorCode { try listen.call(RichFetchRequest(richId: accepted.richId, ticket: elsewhere.token)) } == .forbidden)
        let unknown = secret.issue(user: "x", kind: .ticket, lifetime: 60, resource: "ffff")
        #expect(errorCode { try listen.call(RichFetchRequest(richId: "ffff", ticket: unknown.token)) } == .notFound)
        let valid = secret.issue(user: "x", kind: .ticket, lifetime: 60, resource: accepted.richId)
        let anonymous = try HubClient(connect: hub.cluster.endpoint("nh-publish"), policy: RetryPolicy(timeout: 3_000, attempts: 1), curve: try hub.cluster.curve())
        defer { anonymous.close() }
        #expect(errorCode { try anonymous.call(RichFetchRequest(richId: accepted.richId, ticket: valid.token)) } == .unauthorized)
    }

    @Test("the publish service dies between the signal and the fetch: the agent's retry succeeds after it is back")
    func fetchRetried() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        try hub.start("phone", user: "alice")
        hub.waitForDispatcher(installations: 1, agents: 1)
        #expect(hub.cluster.stop("dev-phone") == 0)
        let bytes = Self.image(64 * 1024)
        let accepted = try hub.send(SendRichNotification(message: "Clip", richType: "file", contentType: "audio/ogg", payload: bytes, userId: "alice"))
        #expect(hub.cluster.waitUntil { hub.outcome(accepted.notificationId)?.targets == 1 })
        #expect(hub.cluster.stop("nh-publish") == 0)
        let phone = try hub.start("phone", user: "alice")
        #expect(hub.cluster.waitUntil(timeout: 10) { hub.cluster.log("dev-phone").contains("rich fetch failed; retrying") })
        #expect(phone.rich().isEmpty)
        try hub.cluster.start("nh-publish")
        #expect(hub.cluster.waitUntil(timeout: 30) { phone.rich().count == 1 })
        #expect(hub.cluster.waitUntil { hub.outcome(accepted.notificationId)?.acknowledged == 1 })
        #expect(hub.outcome(accepted.notificationId)?.failed == 0)
    }

    @Test("after the last try the notification is reported failed with the reason, never delivered")
    func fetchGivesUp() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        try hub.start("phone", user: "alice")
        hub.waitForDispatcher(installations: 1, agents: 1)
        #expect(hub.cluster.stop("dev-phone") == 0)
        let accepted = try hub.send(SendRichNotification(
            message: "Doc", richType: "file", contentType: "application/pdf", payload: Self.image(1000), userId: "alice"))
        #expect(hub.cluster.waitUntil { hub.outcome(accepted.notificationId)?.targets == 1 })
        #expect(hub.cluster.stop("nh-publish") == 0)
        let phone = try hub.start("phone", user: "alice", extra: ["NH_AGENT_RICH_ATTEMPTS": "2"])
        #expect(hub.cluster.waitUntil { phone.events("rich.failed").count == 1 })
        #expect(hub.cluster.waitUntil { hub.outcome(accepted.notificationId)?.failed == 1 })
        #expect(hub.outcome(accepted.notificationId)?.acknowledged == 0)
        #expect(phone.rich().isEmpty)
        #expect((phone.events("rich.failed").first?["reason"] as? String)?.isEmpty == false)
    }

    @Test("an expired payload is gone from the server's disk and the agent's cache")
    func expiry() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let phone = try hub.start("phone", user: "alice")
        hub.waitForDispatcher(installations: 1, agents: 1)
        let accepted = try hub.send(SendRichNotification(
            message: "Brief", richType: "image", contentType: "image/gif", payload: Self.image(2048), userId: "alice", timeToLive: 2))
        #expect(hub.cluster.waitUntil { phone.rich().count == 1 })
        let cached = try #require(phone.rich().first?["path"] as? String)
        #expect(FileManager.default.fileExists(atPath: hub.richFile(accepted.richId).path))
        #expect(FileManager.default.fileExists(atPath: cached))
        #expect(hub.cluster.waitUntil(timeout: 10) {
            !FileManager.default.fileExists(atPath: hub.richFile(accepted.richId).path) && !FileManager.default.fileExists(atPath: cached)
        })
    }

    @Test("bad rich sends get a clear error and store nothing")
    func badInput() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let bytes = Self.image(100)
        #expect(errorCode { try hub.send(SendRichNotification(message: "m", richType: "image", contentType: "image/png", payload: Data())) } == .invalidPayload)
        #expect(errorCode { try hub.send(SendRichNotification(message: "m", richType: "image", contentType: "", payload: bytes)) } == .invalidArgument)
        #expect(errorCode { try hub.send(SendRichNotification(message: "m", richType: "image", contentType: "image/png", payload: bytes, sha256: String(repeating: "0", count: 64))) } == .invalidArgument)
        #expect(errorCode { try hub.send(SendRichNotification(message: "m", richType: "image", contentType: "image/png", payload: Data(repeating: 7, count: (4 << 20) + 1))) } == .payloadTooLarge)
        #expect(errorCode { try hub.send(SendRichNotification(message: "m", richType: "image", contentType: "image/png", payload: bytes), keyName: AccessKey.defaultListenName) } == .forbidden)
        // A missing content type, on the raw wire.
        let key = try hub.cluster.keys().key(named: AccessKey.defaultFullName)!
        let token = ConnectionString(endpoint: "http://127.0.0.1:7780/", keyName: key.name, key: key.key).token(for: "http://127.0.0.1:7780/hub")
        let raw = try RequestClient(connect: hub.cluster.endpoint("nh-publish"), policy: RetryPolicy(timeout: 3_000, attempts: 1), curve: try hub.cluster.curve())
        defer { raw.close() }
        let envelope = #"{"v":1,"type":"rich.send","id":"r","auth":"\#(token)","payload":{"message":"m","richType":"image","payload":"AAEC"}}"#
        let reply = try raw.request([Data(envelope.utf8)])
        let error = try HubCodec.decode(ErrorReply.self, from: reply[0]).payload
        #expect(error.code == .invalidPayload)
        #expect(error.message.contains("contentType"))
        let stored = (try? FileManager.default.contentsOfDirectory(atPath: hub.cluster.dataDirectory.appendingPathComponent("rich").path)) ?? []
        #expect(stored.filter { !$0.hasPrefix(".") }.isEmpty)
        #expect(try hub.cluster.health("nh-publish").details?["latest"] == "0")
    }
}
