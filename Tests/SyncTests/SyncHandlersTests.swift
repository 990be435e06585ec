import Auth
import Foundation
import HubProtocol
import ServiceKit
import TestSupport
import Testing

@testable import NHSync

/// The sync store's request handlers in process, on SQLite, with the hub's own keys: who may do
/// what, each refusal, and an announcement after each change.
@Suite("Sync store request handlers")
final class SyncHandlersTests {
    let harness: ServiceHarness
    let handlers: SyncHandlers
    let announced = Box(0)

    init() throws {
        harness = try ServiceHarness(service: "nh-sync")
        let announced = self.announced
        handlers = SyncHandlers(context: harness.context, store: try StoreEngine.sqlite.makeStore(), announce: { announced.value += 1 })
    }

    var context: ServiceContext { harness.context }
    func sas(_ name: String) -> String { harness.sas(name) }
    func envelope<R: HubRequest>(_ payload: R, auth: String?) -> Envelope<R> { harness.envelope(payload, auth: auth) }
    func code(_ body: () throws -> Any) -> ErrorCode? { harness.code(body) }

    @Test("a credential from Manage becomes a token; the token reads and changes only its user's notifications")
    func userFlow() throws {
        let full = sas(AccessKey.defaultFullName)
        #expect(code { try self.handlers.credential(self.envelope(IssueUserCredential(userId: "alice"), auth: self.sas(AccessKey.defaultListenName))) }
            == .forbidden)
        #expect(code { try self.handlers.credential(self.envelope(IssueUserCredential(userId: "alice", lifetime: 5), auth: full)) } == .invalidArgument)
        #expect(code { try self.handlers.credential(self.envelope(IssueUserCredential(userId: "a b"), auth: full)) } == .invalidArgument)
        let credential = try handlers.credential(envelope(IssueUserCredential(userId: "alice"), auth: full)).credential
        #expect(code { try self.handlers.token(self.envelope(UserTokenRequest(credential: "forged"), auth: nil)) } == .unauthorized)
        let token = try handlers.token(envelope(UserTokenRequest(credential: credential), auth: nil)).token

        let posted = try handlers.post(envelope(
            PostUserNotification(userId: "alice", appNotificationId: "a1", visual: VisualContent(title: "Hi", body: "There")), auth: full))
        #expect(announced.value == 1)
        #expect(code { try self.handlers.post(self.envelope(PostUserNotification(userId: "alice", appNotificationId: "a2"), auth: nil)) } == .unauthorized)
        let changes = try handlers.changes(envelope(UserChangesRequest(cursor: 0), auth: token))
        #expect(changes.changes.map(\.id) == [posted.notification.id])
        #expect(code { try self.handlers.changes(self.envelope(UserChangesRequest(cursor: 0, limit: 101), auth: token)) } == .invalidArgument)
        #expect(code { try self.handlers.changes(self.envelope(UserChangesRequest(cursor: 0), auth: credential)) } == .unauthorized)

        #expect(code { try self.handlers.update(self.envelope(UpdateUserNotificationState(id: posted.notification.id), auth: token)) } == .invalidArgument)
        let read = try handlers.update(envelope(UpdateUserNotificationState(id: posted.notification.id, readState: .read, device: "d1"), auth: token))
        #expect(read.notification.readState == .read && announced.value == 2)
        // Another user's token finds nothing of alice's.
        let bob = context.userTokens.issue(user: "bob", kind: .token, lifetime: 600).token
        #expect(code { try self.handlers.update(self.envelope(UpdateUserNotificationState(id: posted.notification.id, readState: .unread), auth: bob)) }
            == .notFound)
        _ = try handlers.delete(envelope(DeleteUserNotification(id: posted.notification.id, device: "d1"), auth: token))
        #expect(announced.value == 3)
        #expect(code { try self.handlers.history(self.envelope(UserHistoryRequest(), auth: nil)) } == .unauthorized)
        #expect(try handlers.history(envelope(UserHistoryRequest(), auth: bob)).notifications.isEmpty)
    }
}
