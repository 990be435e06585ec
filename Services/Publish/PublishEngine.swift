import Foundation
import HubProtocol
import Postgres
import Storage
import StoreEngines

/// One engine's statements for the publish store's reads, written with numbered parameters (`$1`).
struct PublishSQL: Sendable {
    /// () → sequence: the last accepted notification's.
    var latestSequence: String
    /// (id) → (state, enqueued_at, failed_reason), of a scheduled send that has not fired.
    var scheduledState: String
    /// (id): a claimed scheduled send fires.
    var fire: String
    /// (id, reason): a claimed scheduled send is abandoned, never sent.
    var abandon: String
    /// (after, limit) → accepted notifications.
    var pending: String
    /// (id) → an accepted notification.
    var find: String
    /// (before): forgets notifications that expired before.
    var purge: String

    /// The columns an accepted notification is read from, in `accepted`'s order.
    static let columns = "sequence, notification_id, send, enqueued_at, expires_at"

    init(prefix p: String, latestSequence: String, spell: (String) -> String = { $0 }) {
        self.latestSequence = spell(latestSequence)
        scheduledState = spell("SELECT state, enqueued_at, failed_reason, send FROM \(p)scheduled WHERE notification_id = $1 AND state != 'Fired'")
        fire = spell("UPDATE \(p)scheduled SET state = 'Fired' WHERE notification_id = $1")
        abandon = spell("UPDATE \(p)scheduled SET state = '\(NotificationState.abandoned.rawValue)', failed_reason = $2 WHERE notification_id = $1")
        pending = spell("SELECT \(Self.columns) FROM \(p)notifications WHERE sequence > $1 ORDER BY sequence LIMIT $2")
        find = spell("SELECT \(Self.columns) FROM \(p)notifications WHERE notification_id = $1")
        purge = spell("DELETE FROM \(p)notifications WHERE expires_at < $1")
    }
}

/// One engine of the publish store. Accepting, scheduling, firing and canceling are each
/// engine's own, because they order concurrent writers differently (SQLite has one writer at a
/// time; PostgreSQL's writers in several processes are ordered by the sequence row's lock and
/// claim scheduled sends with SKIP LOCKED). The reads, alike for both, live in this protocol's
/// extension.
protocol PublishEngine: PublishStore, EngineBacked {
    static var sql: PublishSQL { get }
    var decoder: JSONDecoder { get }
}

extension PublishEngine {
    private var sql: PublishSQL { Self.sql }

    func latestSequence() throws -> UInt64 { try oneRow(sql.latestSequence).sequence("sequence", of: "notifications") }

    func scheduledState(_ id: String) throws -> ScheduledState? {
        guard let row = try one(sql.scheduledState, [id]) else { return nil }
        return ScheduledState(
            state: try row.string("state", of: "scheduled", as: NotificationState.self), enqueuedAt: try row.date("enqueued_at", of: "scheduled"),
            reason: try row.optionalString("failed_reason", of: "scheduled"),
            hub: try decoder.decode(SendNotification.self, from: try row.data("send", of: "scheduled")).hub)
    }

    /// Fires a claimed scheduled send, from its row (notification_id, send), in the open
    /// transaction: `accept` takes it (send, time to live, id) when it still validates; else it is
    /// abandoned, never sent, its row saying why. A send that no longer decodes is abandoned too.
    func fire(
        _ row: Row, timeToLive: (SendNotification) throws(HubError) -> Int, into round: inout FiredSends,
        accept: (SendNotification, Int, String) throws -> AcceptedNotification
    ) throws {
        let (id, data) = (try row.string("notification_id", of: "scheduled"), try row.data("send", of: "scheduled"))
        var send: SendNotification
        let lifetime: Int
        do {
            send = try decoder.decode(SendNotification.self, from: data)
            send.scheduledAt = nil
            send.idempotencyKey = nil
            lifetime = try timeToLive(send)
        } catch {
            let reason = (error as? HubError)?.description ?? "the stored send does not decode: \(error)"
            try run(sql.abandon, [id, reason])
            round.abandoned.append(AbandonedSend(notificationId: id, reason: reason))
            return
        }
        try run(sql.fire, [id])
        round.fired.append(try accept(send, lifetime, id))
    }

    func pending(after: UInt64, limit: Int) throws -> [AcceptedNotification] {
        try query(sql.pending, [Int64(clamping: after), limit]).map(accepted)
    }

    func stream(after: UInt64, limit: Int) throws -> [(sequence: UInt64, body: Data)] {
        let table = "notifications"
        return try query(sql.pending, [Int64(clamping: after), limit]).map { row in
            let sequence = try row.sequence("sequence", of: table)
            return (sequence, NotificationStream.body(
                sequence: sequence, notificationId: try row.string("notification_id", of: table), send: try row.data("send", of: table),
                enqueuedAt: try row.date("enqueued_at", of: table), expiresAt: try row.date("expires_at", of: table)))
        }
    }

    func find(_ id: String) throws -> AcceptedNotification? { try one(sql.find, [id]).map(accepted) }

    /// Forgets notifications that expired before `before`; the dispatcher has long pulled them.
    func purge(before: Date) throws -> Int { try run(sql.purge, [before]) }

    /// An accepted notification from a row of `PublishSQL.columns`.
    func accepted(_ row: Row) throws -> AcceptedNotification {
        let table = "notifications"
        return AcceptedNotification(
            sequence: try row.sequence("sequence", of: table), notificationId: try row.string("notification_id", of: table),
            send: try decoder.decode(SendNotification.self, from: try row.data("send", of: table)),
            enqueuedAt: try row.date("enqueued_at", of: table), expiresAt: try row.date("expires_at", of: table))
    }
}
