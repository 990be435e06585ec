import Foundation
import HubProtocol
import ServiceKit
import Storage

/// The sync store on SQLite, the embedded default. Its writes join the service's commit group:
/// the requests waiting at once share one transaction and one sync to disk, and the stream is
/// published from the log once the group has committed.
final class SQLiteUserNotificationStore: UserNotificationStore {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE user_notifications (
                id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                app_notification_id TEXT NOT NULL,
                document BLOB,
                sequence INTEGER NOT NULL,
                created_sequence INTEGER NOT NULL,
                expires_at REAL NOT NULL,
                deleted_at REAL,
                UNIQUE (user_id, app_notification_id)
            );
            CREATE INDEX user_notifications_by_sequence ON user_notifications(user_id, sequence);
            CREATE INDEX user_notifications_live_by_expiry ON user_notifications(expires_at) WHERE deleted_at IS NULL;
            CREATE INDEX user_notifications_tombstones ON user_notifications(deleted_at) WHERE deleted_at IS NOT NULL;
            CREATE TABLE users (
                user_id TEXT PRIMARY KEY,
                sequence INTEGER NOT NULL,
                floor INTEGER NOT NULL DEFAULT 0
            );
            CREATE TABLE stream (id INTEGER PRIMARY KEY CHECK (id = 1), sequence INTEGER NOT NULL);
            INSERT INTO stream (id, sequence) VALUES (1, 0);
            """),
        // The change stream is published from this log, in sequence order, once a change has committed.
        Migration(
            version: 2,
            """
            CREATE TABLE changes (sequence INTEGER PRIMARY KEY, user_id TEXT NOT NULL, user_sequence INTEGER NOT NULL, origin TEXT);
            """),
    ]

    let database: SQLiteDatabase
    let commitGroup: CommitGroup?
    private let encoder = HubCodec.makeEncoder()
    private let decoder = HubCodec.makeDecoder()

    init(database: SQLiteDatabase) {
        self.database = database
        commitGroup = CommitGroup(database: database)
    }

    func streamSequence() throws -> UInt64 {
        UInt64(try database.queryOne("SELECT sequence FROM stream WHERE id = 1")?[0].int64 ?? 0)
    }

    private func nextStreamSequence() throws -> UInt64 {
        try database.run("UPDATE stream SET sequence = sequence + 1 WHERE id = 1")
        return try streamSequence()
    }

    func userSequence(_ user: String) throws -> (sequence: UInt64, floor: UInt64) {
        guard let row = try database.queryOne("SELECT sequence, floor FROM users WHERE user_id = ?", [user]) else { return (0, 0) }
        return (UInt64(row[0].int64 ?? 0), UInt64(row[1].int64 ?? 0))
    }

    private func nextUserSequence(_ user: String) throws -> UInt64 {
        try database.run(
            "INSERT INTO users (user_id, sequence) VALUES (?, 1) ON CONFLICT (user_id) DO UPDATE SET sequence = sequence + 1",
            [user])
        return try userSequence(user).sequence
    }

    /// Numbers the change in the stream and logs it, in the caller's transaction.
    private func change(_ user: String, _ sequence: UInt64, origin: String?) throws -> SyncChange {
        let change = SyncChange(streamSequence: try nextStreamSequence(), userId: user, sequence: sequence, origin: origin)
        try database.run(
            "INSERT INTO changes (sequence, user_id, user_sequence, origin) VALUES (?, ?, ?, ?)",
            [Int64(change.streamSequence), user, Int64(sequence), origin])
        return change
    }

    func post(_ post: PostUserNotification, expiresAt: Date, now: Date) throws -> (UserNotification, SyncChange) {
        try database.transaction {
            let existing = try database.queryOne(
                "SELECT id, document FROM user_notifications WHERE user_id = ? AND app_notification_id = ?",
                [post.userId, post.appNotificationId])
            let sequence = try nextUserSequence(post.userId)
            let notification = try UserNotificationRecords.posted(
                post, existing: existing, expiresAt: expiresAt, now: now, decoder: decoder)
            let id = notification.id
            let document = try encoder.encode(notification)
            if existing == nil {
                try database.run(
                    """
                    INSERT INTO user_notifications (id, user_id, app_notification_id, document, sequence, created_sequence, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                    [id, post.userId, post.appNotificationId, document, sequence, sequence, expiresAt.timeIntervalSince1970])
            } else {
                // A tombstone comes back to life as a new notification; a live one is replaced.
                try database.run(
                    """
                    UPDATE user_notifications SET document = ?, sequence = ?, expires_at = ?, deleted_at = NULL,
                        created_sequence = CASE WHEN deleted_at IS NULL THEN created_sequence ELSE ? END
                    WHERE id = ?
                    """,
                    [document, sequence, expiresAt.timeIntervalSince1970, sequence, id])
            }
            return (notification, try change(post.userId, sequence, origin: nil))
        }
    }

    func live(_ id: String, user: String) throws -> UserNotification? {
        guard let row = try database.queryOne(
            "SELECT document FROM user_notifications WHERE id = ? AND user_id = ? AND deleted_at IS NULL", [id, user]),
            let data = row[0].data
        else { return nil }
        return try decoder.decode(UserNotification.self, from: data)
    }

    func update(_ id: String, user: String, read: ReadState?, action: UserActionState?, origin: String?, now: Date) throws
        -> (UserNotification, SyncChange?)
    {
        try database.transaction {
            guard let current = try live(id, user: user) else { throw UserNotificationRecords.notFound(id) }
            guard let notification = UserNotificationRecords.updated(current, read: read, action: action, now: now) else {
                return (current, nil)
            }
            let sequence = try nextUserSequence(user)
            try database.run(
                "UPDATE user_notifications SET document = ?, sequence = ? WHERE id = ?",
                [try encoder.encode(notification), sequence, id])
            return (notification, try change(user, sequence, origin: origin))
        }
    }

    func delete(_ id: String, user: String, origin: String?, now: Date) throws -> SyncChange {
        try database.transaction {
            guard try live(id, user: user) != nil else { throw UserNotificationRecords.notFound(id) }
            return try tombstone(id, user: user, origin: origin, now: now)
        }
    }

    private func tombstone(_ id: String, user: String, origin: String?, now: Date) throws -> SyncChange {
        let sequence = try nextUserSequence(user)
        try database.run(
            "UPDATE user_notifications SET document = NULL, sequence = ?, deleted_at = ? WHERE id = ?",
            [sequence, now.timeIntervalSince1970, id])
        return try change(user, sequence, origin: origin)
    }

    func expire(now: Date) throws -> [SyncChange] {
        try database.transaction {
            let rows = try database.query(
                "SELECT id, user_id FROM user_notifications WHERE deleted_at IS NULL AND expires_at <= ? ORDER BY user_id",
                [now.timeIntervalSince1970])
            var changes: [SyncChange] = []
            for row in rows {
                changes.append(try tombstone(row[0].string ?? "", user: row[1].string ?? "", origin: nil, now: now))
            }
            let cutoff = now.timeIntervalSince1970 - UserNotificationRecords.tombstoneRetention
            try database.run(
                """
                UPDATE users SET floor = max(floor, (SELECT max(sequence) FROM user_notifications t
                    WHERE t.user_id = users.user_id AND t.deleted_at IS NOT NULL AND t.deleted_at < ?))
                WHERE user_id IN (SELECT user_id FROM user_notifications WHERE deleted_at IS NOT NULL AND deleted_at < ?)
                """, [cutoff, cutoff])
            try database.run("DELETE FROM user_notifications WHERE deleted_at IS NOT NULL AND deleted_at < ?", [cutoff])
            return changes
        }
    }

    func changes(user: String, after cursor: UInt64, limit: Int) throws -> UserChanges {
        let (latest, floor) = try userSequence(user)
        try UserNotificationRecords.checkCursor(cursor, latest: latest, floor: floor)
        let rows = try database.query(
            """
            SELECT id, sequence, created_sequence, document FROM user_notifications
            WHERE user_id = ? AND sequence > ? ORDER BY sequence LIMIT ?
            """, [user, cursor, limit + 1])
        return try UserNotificationRecords.changes(rows, after: cursor, limit: limit, decoder: decoder)
    }

    func history(user: String, now: Date) throws -> UserHistory {
        try database.transaction {
            let rows = try database.query(
                """
                SELECT document FROM user_notifications WHERE user_id = ? AND deleted_at IS NULL AND expires_at > ?
                ORDER BY sequence
                """, [user, now.timeIntervalSince1970])
            return try UserNotificationRecords.history(rows, cursor: try userSequence(user).sequence, decoder: decoder)
        }
    }

    func liveCount() throws -> Int {
        try database.queryOne("SELECT count(*) FROM user_notifications WHERE deleted_at IS NULL")?[0].int ?? 0
    }

    func streamChanges(after sequence: UInt64, limit: Int) throws -> [SyncChange] {
        try database.query(
            "SELECT sequence, user_id, user_sequence, origin FROM changes WHERE sequence > ? ORDER BY sequence LIMIT ?",
            [Int64(sequence), limit]
        ).map(UserNotificationRecords.loggedChange)
    }

    func pruneStream(keeping count: Int) throws {
        try database.run("DELETE FROM changes WHERE sequence <= (SELECT max(sequence) FROM changes) - ?", [count])
    }
}
