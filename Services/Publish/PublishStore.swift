import Foundation
import HubProtocol

/// The publish service's store: accepted notifications in acceptance order, keyed by id and by the
/// sender's idempotency key, and scheduled sends until they fire. A send is accepted once its row
/// is committed; the sequence is the dispatcher's cursor, so sequences only go up, and a reader
/// never sees one before the one below it. Two engines implement it: SQLite, embedded, the
/// default; and PostgreSQL, which several publish processes can share. The contract tests
/// (PublishTests) hold both to the same behaviour.
protocol PublishStore: AnyObject {
    /// The sequence of the last accepted notification.
    func latestSequence() throws -> UInt64
    /// Persists a send, committed when this returns, or with the commit group it runs in (`group`).
    /// A repeated idempotency key returns the first send instead of a new one. On PostgreSQL a send
    /// without a key accepted in a group is inserted with the group's others as the group commits:
    /// its sequence is 0 in what this returns, and the stream announces it.
    /// `encoded`, when given, is `send` as the store's encoder writes it (`HubCodec.encodeValue`).
    func accept(_ send: SendNotification, timeToLive: Int, now: Date, encoded: Data?) throws -> (AcceptedNotification, isNew: Bool)
    /// Runs `body`, the requests of one commit group, in one transaction: all of them commit, or
    /// (when this throws) none.
    func group(_ body: () -> Void) throws
    /// Keeps a send until its time. A repeated idempotency key returns the first one's id.
    func schedule(_ send: SendNotification, fireAt: Date, now: Date) throws -> String
    /// Moves scheduled sends whose time has come into the accepted ones, each in one transaction, so
    /// that a send fires once whatever restarts happen around it and however many processes fire.
    /// A fired send keeps the id its sender was told. A send that `timeToLive` refuses (it no
    /// longer validates, as after a change of the rules) is abandoned, never sent, and keeps why.
    func fireDue(now: Date, timeToLive: (SendNotification) throws(HubError) -> Int) throws -> FiredSends
    /// Cancels a scheduled send that has not fired: `notFound` when there is none, `conflict` when
    /// it has fired or was canceled.
    func cancel(_ id: String) throws
    /// A scheduled send's state and enqueue time, while it has not fired.
    func scheduledState(_ id: String) throws -> ScheduledState?
    /// Accepted notifications after `after`, in sequence order, at most `limit`.
    func pending(after: UInt64, limit: Int) throws -> [AcceptedNotification]
    /// The same notifications as the bodies of the publish service's stream (`NotificationStream`),
    /// made from the stored sends without decoding them.
    func stream(after: UInt64, limit: Int) throws -> [(sequence: UInt64, body: Data)]
    func find(_ id: String) throws -> AcceptedNotification?
    /// Forgets notifications that expired before `before`; returns how many.
    func purge(before: Date) throws -> Int
}

/// A scheduled send that has not fired: waiting, canceled, or abandoned (`reason` says why).
struct ScheduledState: Equatable {
    var state: NotificationState
    var enqueuedAt: Date
    var reason: String?
    /// The hub of the send (nil: the default hub).
    var hub: String? = nil
}

/// A scheduled send abandoned when its time came, and why.
struct AbandonedSend: Equatable {
    var notificationId: String
    var reason: String
}

/// What one round of firing scheduled sends did.
struct FiredSends {
    var fired: [AcceptedNotification] = []
    var abandoned: [AbandonedSend] = []

    /// How many sends the round took on, fired or abandoned.
    var count: Int { fired.count + abandoned.count }
}

extension PublishStore {
    func accept(_ send: SendNotification, timeToLive: Int, now: Date) throws -> (AcceptedNotification, isNew: Bool) {
        try accept(send, timeToLive: timeToLive, now: now, encoded: nil)
    }
}

extension HubError {
    /// Why the scheduled send `id` cannot be canceled, given its state: there is none (nil), or it
    /// has fired or was canceled.
    static func cannotCancel(_ id: String, state: String?) -> HubError {
        guard let state else { return HubError(.notFound, "no scheduled notification '\(id)'") }
        switch state {
        case "Fired": return HubError(.conflict, "scheduled notification '\(id)' is already sent")
        case NotificationState.abandoned.rawValue:
            return HubError(.conflict, "scheduled notification '\(id)' was abandoned when its time came; its outcome says why")
        default: return HubError(.conflict, "scheduled notification '\(id)' is already canceled")
        }
    }
}
