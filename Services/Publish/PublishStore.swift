import Foundation
import HubProtocol
import Storage

/// Accepted notifications. A send is accepted once its row is committed; the sequence is the
/// row's, so the dispatcher can pull everything after its cursor.
final class PublishStore {
    let database: SQLiteDatabase
    private let encoder = HubCodec.makeEncoder()
    private let decoder = HubCodec.makeDecoder()

    init(database: SQLiteDatabase) {
        self.database = database
    }

    func latestSequence() throws -> UInt64 {
        UInt64(try database.queryOne("SELECT coalesce(max(sequence), 0) FROM notifications")?[0].int64 ?? 0)
    }

    /// Persists a send. A repeated idempotency key returns the first send instead of a new one.
    func accept(_ send: SendNotification, timeToLive: Int, now: Date) throws -> (AcceptedNotification, isNew: Bool) {
        try database.transaction {
            if let key = send.idempotencyKey,
                let row = try database.queryOne(
                    "SELECT sequence, notification_id, send, enqueued_at, expires_at FROM notifications WHERE idempotency_key = ?",
                    [key])
            {
                return (try accepted(row), false)
            }
            let id = UUID().uuidString.lowercased()
            let expiresAt = now.addingTimeInterval(TimeInterval(timeToLive))
            try database.run(
                """
                INSERT INTO notifications (notification_id, idempotency_key, send, state, enqueued_at, expires_at)
                VALUES (?, ?, ?, ?, ?, ?)
                """,
                [id, send.idempotencyKey, try encoder.encode(send), NotificationState.enqueued.rawValue,
                 now.timeIntervalSince1970, expiresAt.timeIntervalSince1970])
            let sequence = UInt64(database.lastInsertRowID)
            return (
                AcceptedNotification(sequence: sequence, notificationId: id, send: send, enqueuedAt: now, expiresAt: expiresAt),
                true
            )
        }
    }

    func pending(after: UInt64, limit: Int) throws -> [AcceptedNotification] {
        try database.query(
            """
            SELECT sequence, notification_id, send, enqueued_at, expires_at FROM notifications
            WHERE sequence > ? ORDER BY sequence LIMIT ?
            """, [after, limit]
        ).map(accepted)
    }

    func find(_ id: String) throws -> AcceptedNotification? {
        try database.queryOne(
            "SELECT sequence, notification_id, send, enqueued_at, expires_at FROM notifications WHERE notification_id = ?", [id]
        ).map(accepted)
    }

    /// Forgets notifications that expired more than a day ago; the dispatcher has long pulled them.
    func purge(before: Date) throws -> Int {
        try database.run("DELETE FROM notifications WHERE expires_at < ?", [before.timeIntervalSince1970])
    }

    private func accepted(_ row: Row) throws -> AcceptedNotification {
        AcceptedNotification(
            sequence: UInt64(row[0].int64 ?? 0), notificationId: row[1].string ?? "",
            send: try decoder.decode(SendNotification.self, from: row[2].data ?? Data()),
            enqueuedAt: Date(timeIntervalSince1970: row[3].double ?? 0),
            expiresAt: Date(timeIntervalSince1970: row[4].double ?? 0))
    }
}
