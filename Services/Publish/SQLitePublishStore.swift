import Foundation
import HubProtocol
import Postgres
import Storage
import StoreEngines

/// The publish service's store on SQLite, the embedded default (`publish.db`; the schema is
/// `PublishSchema`). The sequence is the row's: SQLite has one writer at a time, so rows commit in
/// sequence order. Its statements join the commit group the request runs in.
final class SQLitePublishStore: PublishEngine {
    static let sql = PublishSQL(
        prefix: "", latestSequence: "SELECT coalesce(max(sequence), 0) AS sequence FROM notifications", spell: NumberedParameters.sqlite)

    let database: SQLiteDatabase
    private let encoder = HubCodec.makeEncoder()
    let decoder = HubCodec.makeDecoder()
    var engine: SQLiteEngine { SQLiteEngine(database) }

    init(database: SQLiteDatabase) {
        self.database = database
    }

    func group(_ body: () -> Void) throws { try database.transaction { body() } }

    func accept(_ send: SendNotification, timeToLive: Int, now: Date, encoded: Data?) throws -> (AcceptedNotification, isNew: Bool) {
        try accept(send, timeToLive: timeToLive, now: now, id: nil, encoded: encoded)
    }

    /// `id` is given when a scheduled send fires, so it keeps the id its sender was told.
    private func accept(_ send: SendNotification, timeToLive: Int, now: Date, id given: String?, encoded: Data? = nil) throws
        -> (AcceptedNotification, isNew: Bool)
    {
        // Without a key, the send is one INSERT, which SQLite makes or undoes whole by itself, so it
        // needs no savepoint of its own inside the group's transaction.
        guard let key = send.idempotencyKey else { return try insert(send, timeToLive: timeToLive, now: now, id: given, encoded: encoded) }
        return try database.transaction {
            if let row = try database.queryOne("SELECT \(PublishSQL.columns) FROM notifications WHERE idempotency_key = ?", [key]) {
                return (try accepted(row), false)
            }
            return try insert(send, timeToLive: timeToLive, now: now, id: given, encoded: encoded)
        }
    }

    private func insert(_ send: SendNotification, timeToLive: Int, now: Date, id given: String?, encoded: Data?) throws
        -> (AcceptedNotification, isNew: Bool)
    {
        let id = given ?? RandomID.timeOrdered(at: now)
        let expiresAt = now.addingTimeInterval(TimeInterval(timeToLive))
        try database.run(
            """
            INSERT INTO notifications (notification_id, idempotency_key, send, state, enqueued_at, expires_at)
            VALUES (?, ?, ?, ?, ?, ?)
            """,
            [id, send.idempotencyKey, try encoded ?? encoder.encode(send), NotificationState.enqueued.rawValue,
             now.timeIntervalSince1970, expiresAt.timeIntervalSince1970])
        let sequence = UInt64(database.lastInsertRowID)
        return (
            AcceptedNotification(sequence: sequence, notificationId: id, send: send, enqueuedAt: now, expiresAt: expiresAt),
            true
        )
    }

    // MARK: Scheduled sends

    func schedule(_ send: SendNotification, fireAt: Date, now: Date) throws -> String {
        try database.transaction {
            if let key = send.idempotencyKey,
                let row = try database.queryOne("SELECT notification_id FROM scheduled WHERE idempotency_key = ?", [key])
            {
                return try row.string("notification_id", of: "scheduled")
            }
            let id = RandomID.timeOrdered(at: now)
            try database.run(
                "INSERT INTO scheduled (notification_id, idempotency_key, send, fire_at, state, enqueued_at) VALUES (?, ?, ?, ?, ?, ?)",
                [id, send.idempotencyKey, try encoder.encode(send), fireAt.timeIntervalSince1970,
                 NotificationState.scheduled.rawValue, now.timeIntervalSince1970])
            return id
        }
    }

    func fireDue(now: Date, timeToLive: (SendNotification) throws(HubError) -> Int) throws -> FiredSends {
        let due = try database.query(
            "SELECT notification_id, send FROM scheduled WHERE state = ? AND fire_at <= ? ORDER BY fire_at LIMIT 500",
            [NotificationState.scheduled.rawValue, now.timeIntervalSince1970])
        var round = FiredSends()
        for row in due {
            try database.transaction {
                try fire(row, timeToLive: timeToLive, into: &round) { try accept($0, timeToLive: $1, now: now, id: $2).0 }
            }
        }
        return round
    }

    func cancel(_ id: String) throws {
        let state = try database.queryOne("SELECT state FROM scheduled WHERE notification_id = ?", [id]).map { try $0.string("state", of: "scheduled") }
        guard state == NotificationState.scheduled.rawValue else { throw HubError.cannotCancel(id, state: state) }
        try database.run("UPDATE scheduled SET state = ? WHERE notification_id = ?", [NotificationState.canceled.rawValue, id])
    }
}
