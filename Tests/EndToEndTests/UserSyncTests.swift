import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Testing

/// "Handled once, dismissed everywhere": a notification posted to a user reaches all of that user's
/// devices, and a state change or delete on one device reaches all the others.
@Suite("Per-user sync", .serialized)
struct UserSyncTests {
    struct Device {
        let name: String
        let home: URL
        let control: String
        let output: URL
        let credential: String

        func lines() -> [[String: Any]] { jsonLines(output) }

        func events(_ name: String) -> [[String: Any]] { lines().filter { $0["event"] as? String == name } }

        /// The state the device's output describes: the latest notification per id, minus deletes.
        func state() -> [String: [String: Any]] {
            var state: [String: [String: Any]] = [:]
            for line in lines() {
                guard let id = line["id"] as? String else { continue }
                switch line["event"] as? String {
                case "user.created", "user.updated": state[id] = line["notification"] as? [String: Any]
                case "user.deleted": state[id] = nil
                default: continue
                }
            }
            return state
        }
    }

    final class Hub {
        let cluster: ServiceCluster
        var devices: [String: Device] = [:]

        init(environment: [String: String] = [:]) throws {
            cluster = try ServiceCluster()
            cluster.environment.merge(environment) { $1 }
            for service in ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish"] { try cluster.start(service) }
            for service in ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish"] { try cluster.waitHealthy(service) }
        }

        func credential(_ user: String) throws -> String {
            let sync = try cluster.client(cluster.endpoint("nh-sync"))
            defer { sync.close() }
            return try sync.call(IssueUserCredential(userId: user)).credential
        }

        func environment(_ device: Device) -> [String: String] {
            ["NH_AGENT_HOME": device.home.path, "NH_AGENT_REQUESTS": device.control, "NH_AGENT_USER_CREDENTIAL": device.credential]
        }

        @discardableResult
        func start(_ name: String, user: String? = nil) throws -> Device {
            let device = try devices[name] ?? Device(
                name: name, home: cluster.dataDirectory.appendingPathComponent("dev-\(name)"),
                control: ServiceCluster.freeEndpoint(), output: cluster.dataDirectory.appendingPathComponent("dev-\(name).jsonl"),
                credential: credential(user!))
            devices[name] = device
            try cluster.start("nh-agent", as: "dev-\(name)", environment: environment(device), stdout: device.output)
            try cluster.waitHealthy("nh-agent", endpoint: device.control)
            #expect(cluster.waitUntil { (try? cluster.health("nh-agent", endpoint: device.control).details?["registered"]) == "true" })
            return device
        }

        func waitForDispatcher(agents: Int) {
            #expect(cluster.waitUntil { (try? cluster.health("nh-dispatch").details?["agents"]) == String(agents) })
        }

        func post(_ user: String, _ app: String, title: String = "Title", expiresAt: Date? = nil) throws -> UserNotification {
            let publish = try cluster.client(cluster.endpoint("nh-publish"))
            defer { publish.close() }
            return try publish.call(PostUserNotification(
                userId: user, appNotificationId: app, visual: VisualContent(title: title, body: "body of \(app)"),
                expiresAt: expiresAt)).notification
        }

        func act(_ device: Device, _ action: String, _ id: String) throws {
            let result = try cluster.runTool("nh-agent", [action, id], environment: environment(device))
            #expect(result.status == 0, "\(result.output)\(result.error)")
        }

        /// A client of the sync store with a user token for `user`.
        func userClient(_ user: String) throws -> HubClient {
            let sync = try cluster.client(cluster.endpoint("nh-sync"))
            let token = try sync.call(UserTokenRequest(credential: try credential(user))).token
            sync.auth = { token }
            return sync
        }
    }

    @Test("post, dismiss, delete, offline catch-up, replace, and isolation between users")
    func handledOnceDismissedEverywhere() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let a1 = try hub.start("A1", user: "U1")
        let a2 = try hub.start("A2", user: "U1")
        let b = try hub.start("B", user: "U2")
        hub.waitForDispatcher(agents: 3)

        // 2. Post to U1: A1 and A2 each show it once; B shows nothing.
        let first = try hub.post("U1", "welcome")
        #expect(hub.cluster.waitUntil { a1.events("user.created").count == 1 && a2.events("user.created").count == 1 })
        Thread.sleep(forTimeInterval: 0.3)
        #expect(a1.events("user.created").count == 1)
        #expect(a2.events("user.created").count == 1)
        #expect(b.events("user.created").isEmpty)

        // 3. Dismiss on A1: A2 shows it dismissed, and it is still in A2's history.
        try hub.act(a1, "dismiss", first.id)
        #expect(hub.cluster.waitUntil { a2.state()[first.id]?["userActionState"] as? String == "dismissed" })
        let history = try hub.cluster.runTool("nh-agent", ["history"], environment: hub.environment(a2))
        #expect(history.output.contains(first.id) && history.output.contains("dismissed"), "\(history.output)\(history.error)")
        #expect(a1.state()[first.id]?["userActionState"] as? String == "dismissed")

        // 4. Delete on A2: A1 sees the delete.
        try hub.act(a2, "delete", first.id)
        #expect(hub.cluster.waitUntil { a1.events("user.deleted").count == 1 })
        #expect(a1.state().isEmpty && a2.state().isEmpty)

        // 5. Stop A2; post 3, update 1, delete 1. On restart A2 shows the exact final state.
        #expect(hub.cluster.stop("dev-A2") == 0)
        let n1 = try hub.post("U1", "n1")
        let n2 = try hub.post("U1", "n2")
        let n3 = try hub.post("U1", "n3")
        #expect(hub.cluster.waitUntil { a1.state().count == 3 })
        try hub.act(a1, "read", n1.id)
        try hub.act(a1, "delete", n2.id)
        let linesBefore = a2.lines().count
        try hub.start("A2")
        #expect(hub.cluster.waitUntil { a2.state().count == 2 })
        Thread.sleep(forTimeInterval: 0.3)
        let caughtUp = a2.lines().dropFirst(linesBefore).filter { ($0["event"] as? String)?.hasPrefix("user.") == true }
        #expect(caughtUp.count == 2, "only the final state, no duplicates: \(caughtUp)")
        #expect(Set(a2.state().keys) == [n1.id, n3.id])
        #expect(a2.state()[n1.id]?["readState"] as? String == "read")
        #expect(a2.state()[n3.id]?["readState"] as? String == "unread")
        let list = try hub.cluster.runTool("nh-agent", ["list"], environment: hub.environment(a2)).output
        #expect(list.split(separator: "\n").count == 2)

        // 6. Re-post the same appNotificationId: it is replaced, not duplicated.
        let replaced = try hub.post("U1", "n3", title: "Updated title")
        #expect(replaced.id == n3.id)
        #expect(hub.cluster.waitUntil {
            (a1.state()[n3.id]?["visual"] as? [String: Any])?["title"] as? String == "Updated title"
                && (a2.state()[n3.id]?["visual"] as? [String: Any])?["title"] as? String == "Updated title"
        })
        #expect(a1.state().count == 2 && a2.state().count == 2)

        // 9. B's token cannot read or change U1's notifications.
        let asU2 = try hub.userClient("U2")
        defer { asU2.close() }
        #expect(try asU2.call(UserHistoryRequest()).notifications.isEmpty)
        #expect(try asU2.call(UserChangesRequest(cursor: 0)).changes.isEmpty)
        #expect(throws: HubError(.notFound, "no notification '\(n1.id)' for this user")) {
            try asU2.call(UpdateUserNotificationState(id: n1.id, userActionState: .dismissed))
        }
        #expect(throws: HubError.self) { try asU2.call(DeleteUserNotification(id: n1.id)) }
        #expect(a1.state()[n1.id]?["userActionState"] as? String == "noInteraction")
        #expect(b.lines().allSatisfy { ($0["event"] as? String)?.hasPrefix("user.") != true })
    }

    @Test("an expired notification leaves every device and the history")
    func expiry() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let a1 = try hub.start("A1", user: "U1")
        let a2 = try hub.start("A2", user: "U1")
        hub.waitForDispatcher(agents: 2)
        let brief = try hub.post("U1", "brief", expiresAt: Date().addingTimeInterval(1.5))
        let lasting = try hub.post("U1", "lasting")
        // Whether a device sees the brief one before it expires depends on timing; the lasting one it must see.
        #expect(hub.cluster.waitUntil { a1.state()[lasting.id] != nil && a2.state()[lasting.id] != nil })
        #expect(hub.cluster.waitUntil { a1.state()[brief.id] == nil && a2.state()[brief.id] == nil })
        #expect(Set(a1.state().keys) == [lasting.id])
        let u1 = try hub.userClient("U1")
        defer { u1.close() }
        #expect(try u1.call(UserHistoryRequest()).notifications.map(\.id) == [lasting.id])
    }

    @Test("250 posts while an agent is offline arrive in batches of at most 100")
    func batches() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let device = try hub.start("A1", user: "U1")
        #expect(hub.cluster.stop("dev-A1") == 0)
        for index in 0..<250 { _ = try hub.post("U1", "bulk-\(index)") }
        try hub.start("A1")
        #expect(hub.cluster.waitUntil { device.state().count == 250 })
        let batches = hub.cluster.log("dev-A1").split(separator: "\n").filter { $0.contains("msg=\"sync batch\"") }
            .compactMap { line in line.split(separator: " ").first { $0.hasPrefix("changes=") }.flatMap { Int($0.dropFirst(8)) } }
        #expect(batches == [100, 100, 50], "\(batches)")
        #expect(device.events("user.created").count == 250)
    }

    @Test("an expiring user token is traded for a fresh one, and the agent says so")
    func tokenRefresh() throws {
        let hub = try Hub(environment: ["NH_USER_TOKEN_LIFETIME": "62"])
        defer { hub.cluster.stopAll() }
        let device = try hub.start("A1", user: "U1")
        // A token with 62 s to live is "expiring" (under a minute left) within 2 s, so the next call trades again.
        Thread.sleep(forTimeInterval: 2.2)
        _ = try hub.post("U1", "after-refresh")
        #expect(hub.cluster.waitUntil { device.events("user.created").count == 1 })
        #expect(device.events("token.requested").count >= 2)
    }

    @Test("bad input gets a stable code and leaves the store unchanged")
    func badInput() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let n = try hub.post("U1", "kept")
        let u1 = try hub.userClient("U1")
        defer { u1.close() }
        let publish = try hub.cluster.client(hub.cluster.endpoint("nh-publish"))
        defer { publish.close() }
        #expect(errorCode { try u1.call(UpdateUserNotificationState(id: "nope", readState: .read)) } == .notFound)
        #expect(errorCode { try u1.call(UpdateUserNotificationState(id: n.id)) } == .invalidArgument)
        #expect(errorCode { try publish.call(PostUserNotification(userId: "U1", appNotificationId: "x", visual: VisualContent(title: "t", body: "b"),
                                                                expiresAt: Date().addingTimeInterval(-5))) } == .invalidArgument)
        #expect(errorCode { try publish.call(PostUserNotification(userId: "U1", appNotificationId: "x", visual: VisualContent(title: "t", body: "b"),
                                                                expiresAt: Date().addingTimeInterval(31 * 86_400))) } == .invalidArgument)
        #expect(errorCode { try publish.call(PostUserNotification(userId: "U1", appNotificationId: "x")) } == .invalidPayload)
        #expect(errorCode { try u1.call(UserChangesRequest(cursor: 999)) } == .historyRewound)
        let listen = try hub.cluster.client(hub.cluster.endpoint("nh-publish"), keyName: AccessKey.defaultListenName)
        defer { listen.close() }
        #expect(errorCode { try listen.call(PostUserNotification(userId: "U1", appNotificationId: "y", raw: "r")) } == .forbidden)

        // Missing, expired and forged user tokens.
        let sync = try HubClient(connect: hub.cluster.endpoint("nh-sync"), policy: RetryPolicy(timeout: 3_000, attempts: 1), curve: try hub.cluster.curve())
        defer { sync.close() }
        #expect(errorCode { try sync.call(UserHistoryRequest()) } == .unauthorized)
        let secret = try UserTokens.loadOrCreate(directory: hub.cluster.dataDirectory)
        let expired = secret.issue(user: "U1", kind: .token, lifetime: -10).token
        #expect(errorCode { try sync.call(UserHistoryRequest(), auth: expired) } == .unauthorized)
        let forged = UserTokens(secret: Data(repeating: 1, count: 32)).issue(user: "U1", kind: .token, lifetime: 60).token
        #expect(errorCode { try sync.call(UserHistoryRequest(), auth: forged) } == .unauthorized)
        let credentialAsToken = secret.issue(user: "U1", kind: .credential, lifetime: 60).token
        #expect(errorCode { try sync.call(UserHistoryRequest(), auth: credentialAsToken) } == .unauthorized)

        // An unknown state value, on the raw wire.
        let token = try u1.call(UserTokenRequest(credential: try hub.credential("U1"))).token
        let raw = try RequestClient(connect: hub.cluster.endpoint("nh-sync"), policy: RetryPolicy(timeout: 3_000, attempts: 1), curve: try hub.cluster.curve())
        defer { raw.close() }
        let envelope = #"{"v":1,"type":"user.state","id":"r","auth":"\#(token)","payload":{"id":"\#(n.id)","userActionState":"archived"}}"#
        let reply = try raw.request([Data(envelope.utf8)])
        #expect(try HubCodec.decode(ErrorReply.self, from: reply[0]).payload.code == .invalidPayload)

        let history = try u1.call(UserHistoryRequest())
        #expect(history.notifications.map(\.id) == [n.id])
        #expect(history.notifications.first?.readState == .unread)
        #expect(history.notifications.first?.userActionState == .noInteraction)
        #expect(history.cursor == 1)
    }
}
