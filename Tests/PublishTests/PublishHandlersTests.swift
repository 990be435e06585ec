import Auth
import Foundation
import HubProtocol
import ServiceKit
import Storage
import TestSupport
import Testing

@testable import NHPublish

/// The publish service's request handlers in process, on SQLite, with the hub's own keys.
@Suite("Publish request handlers")
final class PublishHandlersTests {
    let harness: ServiceHarness
    let store: SQLitePublishStore
    let handlers: PublishHandlers

    init() throws {
        harness = try ServiceHarness(service: "nh-publish")
        let database = try SQLiteDatabase(path: harness.dataDir + "/publish.db")
        try database.migrate(PublishSchema.migrations)
        let store = SQLitePublishStore(database: database)
        self.store = store
        let rich = try SQLiteRichStore(database: database, directory: URL(fileURLWithPath: harness.dataDir).appendingPathComponent("rich"))
        handlers = PublishHandlers(
            context: harness.context, store: store, rich: rich, accept: { try store.accept($0, timeToLive: $1, now: Date(), encoded: $2).0 }, latest: { 42 })
    }

    var context: ServiceContext { harness.context }
    func sas(_ name: String) -> String { harness.sas(name) }
    func envelope<R: HubRequest>(_ payload: R, auth: String?) -> Envelope<R> { harness.envelope(payload, auth: auth) }
    func code(_ body: () throws -> Any) -> ErrorCode? { harness.code(body) }

    @Test("a send needs Send and passes the rules; it is enqueued, scheduled or cancelled, and its outcome is known before planning")
    func sends() throws {
        let full = sas(AccessKey.defaultFullName), listen = sas(AccessKey.defaultListenName)
        let send = SendNotification(format: .template, properties: ["m": "hi"], tagExpression: "World")
        #expect(code { try self.handlers.send(self.envelope(send, auth: listen)) } == .forbidden)
        #expect(code { try self.handlers.send(self.envelope(SendNotification(format: .template, properties: ["m": "hi"], tagExpression: "a &&"), auth: full)) }
            == .invalidExpression)
        var forged = send
        forged.rich = RichReference(richId: "x", richType: "image", message: "m", contentType: "image/png", size: 1)
        #expect(code { try self.handlers.send(self.envelope(forged, auth: full)) } == .invalidArgument)
        let accepted = try handlers.send(envelope(send, auth: full))
        #expect(accepted.state == .enqueued)
        #expect(try handlers.outcome(envelope(OutcomeRequest(notificationId: accepted.notificationId), auth: full)).state == .enqueued)
        var later = send
        later.scheduledAt = Date().addingTimeInterval(3_600)
        let scheduled = try handlers.send(envelope(later, auth: full))
        #expect(scheduled.state == .scheduled)
        #expect(try handlers.outcome(envelope(OutcomeRequest(notificationId: scheduled.notificationId), auth: full)).state == .scheduled)
        _ = try handlers.cancel(envelope(CancelScheduledNotification(notificationId: scheduled.notificationId), auth: full))
        #expect(try handlers.outcome(envelope(OutcomeRequest(notificationId: scheduled.notificationId), auth: full)).state == .canceled)
        #expect(code { try self.handlers.outcome(self.envelope(OutcomeRequest(notificationId: "missing"), auth: full)) } == .notFound)
        // The dispatchers' pull holds every hub's sends: it needs a namespace key, and gives the stream's position.
        #expect(code { try self.handlers.pending(self.envelope(PendingNotificationsRequest(after: 0), auth: listen)) } == .unauthorized)
        #expect(code { try self.handlers.pending(self.envelope(PendingNotificationsRequest(after: 0), auth: full)) } == .unauthorized)
        let pulled = try handlers.pending(envelope(PendingNotificationsRequest(after: 0, limit: 0), auth: harness.root))
        #expect(pulled.notifications.map(\.notificationId) == [accepted.notificationId] && pulled.latest == 42)
    }

    /// The rules are checked again as the send fires: a limit lowered, or a rule added, since it
    /// was scheduled turns it away then, rather than sending it with a lifetime it never had.
    @Test("a scheduled send that no longer passes the rules when due is abandoned, and its outcome says why")
    func scheduledSendNoLongerValid() throws {
        let full = sas(AccessKey.defaultFullName)
        let now = Date()
        var send = SendNotification(format: .template, properties: ["m": "hi"], tagExpression: "World", scheduledAt: now.addingTimeInterval(60))
        send.timeToLive = SendRules.maxTimeToLive + 1
        let id = try store.schedule(send, fireAt: now.addingTimeInterval(60), now: now)
        let round = try handlers.fireScheduled(now: now.addingTimeInterval(61))
        #expect(round.fired.isEmpty)
        #expect(round.abandoned.map(\.notificationId) == [id])
        let outcome = try handlers.outcome(envelope(OutcomeRequest(notificationId: id), auth: full))
        #expect(outcome.state == .abandoned)
        #expect(outcome.reason?.contains("timeToLive") == true)
        #expect(try handlers.pending(envelope(PendingNotificationsRequest(after: 0), auth: harness.root)).notifications.isEmpty)
    }

    @Test("a rich payload is stored, then fetched only with a ticket for it")
    func rich() throws {
        let full = sas(AccessKey.defaultFullName), listen = sas(AccessKey.defaultListenName)
        let bytes = Data("png bytes".utf8)
        let accepted = try handlers.sendRich(envelope(
            SendRichNotification(message: "New photo", richType: "image", contentType: "image/png", payload: bytes, userId: "alice"), auth: full))
        let pulled = try handlers.pending(envelope(PendingNotificationsRequest(after: 0), auth: harness.root))
        #expect(pulled.notifications.first?.send.rich?.richId == accepted.richId)
        let ticket = context.userTokens.issue(user: "dev-1", kind: .ticket, lifetime: 60, resource: accepted.richId).token
        #expect(try handlers.fetchRich(envelope(RichFetchRequest(richId: accepted.richId, ticket: ticket), auth: listen)).data == bytes)
        let other = context.userTokens.issue(user: "dev-1", kind: .ticket, lifetime: 60, resource: "another").token
        #expect(code { try self.handlers.fetchRich(self.envelope(RichFetchRequest(richId: accepted.richId, ticket: other), auth: listen)) } == .forbidden)
        #expect(code { try self.handlers.fetchRich(self.envelope(RichFetchRequest(richId: accepted.richId, ticket: "forged"), auth: listen)) }
            == .unauthorized)
        let missing = context.userTokens.issue(user: "dev-1", kind: .ticket, lifetime: 60, resource: "nothing").token
        #expect(code { try self.handlers.fetchRich(self.envelope(RichFetchRequest(richId: "nothing", ticket: missing), auth: listen)) } == .notFound)
    }

    @Test("a rich payload encrypted end to end is one RFC 8291 record for one user, stored and handed back as it came")
    func encryptedRich() throws {
        let full = sas(AccessKey.defaultFullName), listen = sas(AccessKey.defaultListenName)
        let user = P256Key.generate()
        let record = try WebPushEncryption.encrypt(Data("a picture".utf8), p256dh: user.publicPoint, auth: Data(repeating: 1, count: 16))
        func rich(_ payload: Data, user: String? = "alice", tag: String? = nil) -> SendRichNotification {
            SendRichNotification(
                message: "New photo", richType: "image", contentType: "image/png", payload: payload, tagExpression: tag, userId: user,
                keyId: "a2V5LWlk")
        }
        let accepted = try handlers.sendRich(envelope(rich(record), auth: full))
        let pulled = try handlers.pending(envelope(PendingNotificationsRequest(after: 0), auth: harness.root))
        #expect(pulled.notifications.last?.send.rich?.keyId == "a2V5LWlk")
        let ticket = context.userTokens.issue(user: "dev-1", kind: .ticket, lifetime: 60, resource: accepted.richId).token
        #expect(try handlers.fetchRich(envelope(RichFetchRequest(richId: accepted.richId, ticket: ticket), auth: listen)).data == record)
        #expect(code { try self.handlers.sendRich(self.envelope(rich(Data("a picture".utf8)), auth: full)) } == .invalidPayload)
        #expect(code { try self.handlers.sendRich(self.envelope(rich(record, user: nil, tag: "World"), auth: full)) } == .invalidArgument)
        #expect(code { try self.handlers.sendRich(self.envelope(rich(record, tag: "World"), auth: full)) } == .invalidArgument)
    }

    @Test("another hub's send is its own: its outcome, its cancel and its rich payload are unknown to the first hub's keys")
    func sendsOfAnotherHub() throws {
        let keys = KeyStore.defaultHubKeys()
        context.hubs.apply(HubCatalog(version: 1, hubs: [HubDescription(
            name: "news", createdAt: Date(),
            policies: keys.map { HubPolicy(name: $0.name, rights: $0.rights.names, key: $0.key, secondaryKey: $0.secondaryKey) })]))
        let newsFull = context.token(for: keys[1], hub: "news"), newsListen = context.token(for: keys[0], hub: "news")
        let full = sas(AccessKey.defaultFullName), listen = sas(AccessKey.defaultListenName)
        func news<R: HubRequest>(_ payload: R, _ auth: String) -> Envelope<R> { Envelope(id: "1", auth: auth, hub: "news", payload: payload) }
        var send = SendNotification(idempotencyKey: "k", format: .template, properties: ["m": "hi"], tagExpression: "World")
        let theirs = try handlers.send(news(send, newsFull))
        // The same idempotency key in the first hub is another send.
        let mine = try handlers.send(envelope(send, auth: full))
        #expect(mine.notificationId != theirs.notificationId)
        let stored = try #require(try store.find(theirs.notificationId))
        #expect(stored.send.hub == "news" && stored.send.idempotencyKey == "news/k")
        #expect(code { try self.handlers.outcome(self.envelope(OutcomeRequest(notificationId: theirs.notificationId), auth: full)) } == .notFound)
        #expect(try handlers.outcome(news(OutcomeRequest(notificationId: theirs.notificationId), newsFull)).state == .enqueued)
        send.scheduledAt = Date().addingTimeInterval(3_600)
        let scheduled = try handlers.send(news(send, newsFull))
        #expect(code { try self.handlers.cancel(self.envelope(CancelScheduledNotification(notificationId: scheduled.notificationId), auth: full)) }
            == .notFound)
        // A hub names its sends itself: a send may not claim one.
        var claiming = SendNotification(format: .template, properties: ["m": "hi"])
        claiming.hub = "news"
        #expect(code { try self.handlers.send(self.envelope(claiming, auth: full)) } == .invalidArgument)
        // A rich payload: the ticket is for an installation of its hub, and fetched with that hub's key alone.
        let rich = try handlers.sendRich(news(
            SendRichNotification(message: "m", richType: "image", contentType: "image/png", payload: Data("b".utf8), userId: "alice"), newsFull))
        let ticket = context.userTokens.issue(user: "news/dev-1", kind: .ticket, lifetime: 60, resource: rich.richId).token
        #expect(try handlers.fetchRich(news(RichFetchRequest(richId: rich.richId, ticket: ticket), newsListen)).data == Data("b".utf8))
        #expect(code { try self.handlers.fetchRich(self.envelope(RichFetchRequest(richId: rich.richId, ticket: ticket), auth: listen)) } == .forbidden)
        let homeTicket = context.userTokens.issue(user: "dev-1", kind: .ticket, lifetime: 60, resource: rich.richId).token
        #expect(code { try self.handlers.fetchRich(news(RichFetchRequest(richId: rich.richId, ticket: homeTicket), newsListen)) } == .forbidden)
        // Its hub deleted, a scheduled send goes with it when its time comes.
        context.hubs.apply(HubCatalog(version: 2, hubs: []))
        let round = try handlers.fireScheduled(now: Date().addingTimeInterval(3_601))
        #expect(round.fired.isEmpty && round.abandoned.map(\.notificationId) == [scheduled.notificationId])
        #expect(round.abandoned.first?.reason.contains("deleted") == true)
    }

    @Test("a user post the sync store did not answer in time is unavailable, safe to post again; other answers pass through")
    func userPostAnswers() throws {
        let timedOut = PublishHandlers.posted(.failure(HubError(.timeout, "no reply from tcp://127.0.0.1:7731")))
        guard case .failure(let error) = timedOut else {
            Issue.record("a timeout should stay a failure")
            return
        }
        #expect(error.code == .unavailable && error.message.contains("posting again with the same appNotificationId is safe"))
        let refused = HubError(.forbidden, "the key cannot post")
        guard case .failure(let passed) = PublishHandlers.posted(.failure(refused)) else {
            Issue.record("a refusal should stay a failure")
            return
        }
        #expect(passed == refused)
    }
}
