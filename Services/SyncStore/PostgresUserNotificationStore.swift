import Foundation
import HubProtocol
import Postgres
import ServiceKit
import Storage

/// The sync store on PostgreSQL, which several sync processes can share. Its tables live in the
/// schema `sync`, named in full in every statement, so that a reconnected session needs no
/// settings. Every writing transaction locks the stream's row first, so the row's lock orders the
/// writers of every process: per-user and stream sequences are taken in turn, commit in order and
/// without gaps, and what a writer reads after the lock is what the writer before it committed.
/// Each call commits its own transaction, durable once it returns.
final class PostgresUserNotificationStore: UserNotificationStore {
    static let schema = "sync"
    static let notifyChannel = "nh_sync_changes"

    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE SCHEMA IF NOT EXISTS sync;
            CREATE TABLE sync.user_notifications (
                id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                app_notification_id TEXT NOT NULL,
                document BYTEA,
                sequence BIGINT NOT NULL,
                created_sequence BIGINT NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                deleted_at DOUBLE PRECISION,
                UNIQUE (user_id, app_notification_id)
            );
            CREATE INDEX user_notifications_by_sequence ON sync.user_notifications(user_id, sequence);
            CREATE INDEX user_notifications_live_by_expiry ON sync.user_notifications(expires_at) WHERE deleted_at IS NULL;
            CREATE INDEX user_notifications_tombstones ON sync.user_notifications(deleted_at) WHERE deleted_at IS NOT NULL;
            CREATE TABLE sync.users (
                user_id TEXT PRIMARY KEY,
                sequence BIGINT NOT NULL,
                floor BIGINT NOT NULL DEFAULT 0
            );
            CREATE TABLE sync.stream (id INTEGER PRIMARY KEY CHECK (id = 1), sequence BIGINT NOT NULL);
            INSERT INTO sync.stream (id, sequence) VALUES (1, 0);
            CREATE TABLE sync.changes (sequence BIGINT PRIMARY KEY, user_id TEXT NOT NULL, user_sequence BIGINT NOT NULL, origin TEXT);
            """),
    ]

    let connection: PostgresConnection
    /// None: each call commits its own transaction.
    var commitGroup: CommitGroup? { nil }
    private let encoder = HubCodec.makeEncoder()
    private let decoder = HubCodec.makeDecoder()

    /// Connects, makes the schema when it is missing, and brings it to the code's version.
    init(url: String) throws {
        connection = try PostgresConnection(url: url)
        try connection.migrate(Self.migrations, name: Self.schema)
    }

    func streamSequence() throws -> UInt64 {
        UInt64(try connection.queryOne("SELECT sequence FROM sync.stream WHERE id = 1")?[0].int64 ?? 0)
    }

    /// A writing transaction's first statement: the stream's row stays locked until it commits.
    private func lockStream() throws {
        try connection.run("SELECT sequence FROM sync.stream WHERE id = 1 FOR UPDATE")
    }

    /// Runs `body` as a writing transaction, under the stream's lock.
    private func write<T>(_ body: () throws -> T) throws -> T {
        try connection.transaction {
            try lockStream()
            return try body()
        }
    }

    func userSequence(_ user: String) throws -> (sequence: UInt64, floor: UInt64) {
        guard let row = try connection.queryOne("SELECT sequence, floor FROM sync.users WHERE user_id = $1", [user]) else { return (0, 0) }
        return (UInt64(row[0].int64 ?? 0), UInt64(row[1].int64 ?? 0))
    }

    private func nextUserSequence(_ user: String) throws -> UInt64 {
        UInt64(try connection.queryOne(
            """
            INSERT INTO sync.users (user_id, sequence) VALUES ($1, 1)
            ON CONFLICT (user_id) DO UPDATE SET sequence = sync.users.sequence + 1 RETURNING sequence
            """, [user])?[0].int64 ?? 0)
    }

    /// Numbers the change in the stream and logs it, in the caller's transaction; the other sync
    /// processes hear of it when it commits.
    private func change(_ user: String, _ sequence: UInt64, origin: String?) throws -> SyncChange {
        let stream = UInt64(try connection.queryOne(
            "UPDATE sync.stream SET sequence = sequence + 1 WHERE id = 1 RETURNING sequence")?[0].int64 ?? 0)
        try connection.run(
            "INSERT INTO sync.changes (sequence, user_id, user_sequence, origin) VALUES ($1, $2, $3, $4)",
            [Int64(stream), user, Int64(sequence), origin])
        try connection.notify(Self.notifyChannel, payload: String(stream))
        return SyncChange(streamSequence: stream, userId: user, sequence: sequence, origin: origin)
    }

    func post(_ post: PostUserNotification, expiresAt: Date, now: Date) throws -> (UserNotification, SyncChange) {
        try write {
            let existing = try connection.queryOne(
                "SELECT id, document FROM sync.user_notifications WHERE user_id = $1 AND app_notification_id = $2",
                [post.userId, post.appNotificationId])
            let sequence = try nextUserSequence(post.userId)
            let notification = try UserNotificationRecords.posted(
                post, existing: existing, expiresAt: expiresAt, now: now, decoder: decoder)
            let id = notification.id
            let document = try encoder.encode(notification)
            if existing == nil {
                try connection.run(
                    """
                    INSERT INTO sync.user_notifications (id, user_id, app_notification_id, document, sequence, created_sequence, expires_at)
                    VALUES ($1, $2, $3, $4, $5, $5, $6)
                    """,
                    [id, post.userId, post.appNotificationId, document, Int64(sequence), expiresAt])
            } else {
                // A tombstone comes back to life as a new notification; a live one is replaced.
                try connection.run(
                    """
                    UPDATE sync.user_notifications SET document = $1, sequence = $2, expires_at = $3, deleted_at = NULL,
                        created_sequence = CASE WHEN deleted_at IS NULL THEN created_sequence ELSE $2 END
                    WHERE id = $4
                    """,
                    [document, Int64(sequence), expiresAt, id])
            }
            return (notification, try change(post.userId, sequence, origin: nil))
        }
    }

    func live(_ id: String, user: String) throws -> UserNotification? {
        guard let row = try connection.queryOne(
            "SELECT document FROM sync.user_notifications WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL", [id, user]),
            let data = row[0].data
        else { return nil }
        return try decoder.decode(UserNotification.self, from: data)
    }

    func update(_ id: String, user: String, read: ReadState?, action: UserActionState?, origin: String?, now: Date) throws
        -> (UserNotification, SyncChange?)
    {
        try write {
            guard let current = try live(id, user: user) else { throw UserNotificationRecords.notFound(id) }
            guard let notification = UserNotificationRecords.updated(current, read: read, action: action, now: now) else {
                return (current, nil)
            }
            let sequence = try nextUserSequence(user)
            try connection.run(
                "UPDATE sync.user_notifications SET document = $1, sequence = $2 WHERE id = $3",
                [try encoder.encode(notification), Int64(sequence), id])
            return (notification, try change(user, sequence, origin: origin))
        }
    }

    func delete(_ id: String, user: String, origin: String?, now: Date) throws -> SyncChange {
        try write {
            guard try live(id, user: user) != nil else { throw UserNotificationRecords.notFound(id) }
            return try tombstone(id, user: user, origin: origin, now: now)
        }
    }

    private func tombstone(_ id: String, user: String, origin: String?, now: Date) throws -> SyncChange {
        let sequence = try nextUserSequence(user)
        try connection.run(
            "UPDATE sync.user_notifications SET document = NULL, sequence = $1, deleted_at = $2 WHERE id = $3",
            [Int64(sequence), now, id])
        return try change(user, sequence, origin: origin)
    }

    func expire(now: Date) throws -> [SyncChange] {
        let cutoff = now.timeIntervalSince1970 - UserNotificationRecords.tombstoneRetention
        // Every process looks every second: the stream's lock is taken only when there is work.
        let due = try connection.queryOne(
            """
            SELECT EXISTS (SELECT 1 FROM sync.user_notifications WHERE deleted_at IS NULL AND expires_at <= $1)
                OR EXISTS (SELECT 1 FROM sync.user_notifications WHERE deleted_at IS NOT NULL AND deleted_at < $2)
            """, [now, cutoff])?[0].bool ?? false
        guard due else { return [] }
        return try write {
            let rows = try connection.query(
                """
                SELECT id, user_id FROM sync.user_notifications WHERE deleted_at IS NULL AND expires_at <= $1
                ORDER BY user_id COLLATE "C", sequence
                """,
                [now])
            var changes: [SyncChange] = []
            for row in rows {
                changes.append(try tombstone(row[0].string ?? "", user: row[1].string ?? "", origin: nil, now: now))
            }
            try connection.run(
                """
                UPDATE sync.users u SET floor = GREATEST(u.floor, dropped.sequence)
                FROM (SELECT user_id, max(sequence) AS sequence FROM sync.user_notifications
                      WHERE deleted_at IS NOT NULL AND deleted_at < $1 GROUP BY user_id) dropped
                WHERE u.user_id = dropped.user_id
                """, [cutoff])
            try connection.run("DELETE FROM sync.user_notifications WHERE deleted_at IS NOT NULL AND deleted_at < $1", [cutoff])
            return changes
        }
    }

    /// Runs `body` in a read-only transaction that sees one point in time, whatever other
    /// processes commit meanwhile.
    private func snapshot<T>(_ body: () throws -> T) throws -> T {
        try connection.transaction {
            try connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return try body()
        }
    }

    func changes(user: String, after cursor: UInt64, limit: Int) throws -> UserChanges {
        try snapshot {
            let (latest, floor) = try userSequence(user)
            try UserNotificationRecords.checkCursor(cursor, latest: latest, floor: floor)
            let rows = try connection.query(
                """
                SELECT id, sequence, created_sequence, document FROM sync.user_notifications
                WHERE user_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3
                """, [user, Int64(bitPattern: cursor), limit + 1])
            return try UserNotificationRecords.changes(rows, after: cursor, limit: limit, decoder: decoder)
        }
    }

    func history(user: String, now: Date) throws -> UserHistory {
        try snapshot {
            let rows = try connection.query(
                """
                SELECT document FROM sync.user_notifications WHERE user_id = $1 AND deleted_at IS NULL AND expires_at > $2
                ORDER BY sequence
                """, [user, now])
            return try UserNotificationRecords.history(rows, cursor: try userSequence(user).sequence, decoder: decoder)
        }
    }

    func liveCount() throws -> Int {
        try connection.queryOne("SELECT count(*) FROM sync.user_notifications WHERE deleted_at IS NULL")?[0].int ?? 0
    }

    func streamChanges(after sequence: UInt64, limit: Int) throws -> [SyncChange] {
        try connection.query(
            "SELECT sequence, user_id, user_sequence, origin FROM sync.changes WHERE sequence > $1 ORDER BY sequence LIMIT $2",
            [Int64(sequence), limit]
        ).map(UserNotificationRecords.loggedChange)
    }

    func pruneStream(keeping count: Int) throws {
        try connection.run("DELETE FROM sync.changes WHERE sequence <= (SELECT max(sequence) FROM sync.changes) - $1", [count])
    }
}
