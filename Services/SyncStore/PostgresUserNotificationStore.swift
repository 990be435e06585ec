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
final class PostgresUserNotificationStore: UserNotificationEngine {
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

    static let sql = UserNotificationSQL(
        prefix: "sync.",
        expiring: """
            SELECT id, user_id FROM sync.user_notifications WHERE deleted_at IS NULL AND expires_at <= $1
            ORDER BY user_id COLLATE "C", sequence
            """,
        raiseFloors: """
            UPDATE sync.users u SET floor = GREATEST(u.floor, dropped.sequence)
            FROM (SELECT user_id, max(sequence) AS sequence FROM sync.user_notifications
                  WHERE deleted_at IS NOT NULL AND deleted_at < $1 GROUP BY user_id) dropped
            WHERE u.user_id = dropped.user_id
            """)

    let connection: PostgresConnection
    /// None: each call commits its own transaction.
    var commitGroup: CommitGroup? { nil }
    let encoder = HubCodec.makeEncoder()
    let decoder = HubCodec.makeDecoder()
    var engine: PostgresEngine { PostgresEngine(connection) }

    /// Connects, makes the schema when it is missing, and brings it to the code's version.
    init(url: String) throws {
        connection = try PostgresConnection(url: url)
        try connection.migrate(Self.migrations, name: Self.schema)
    }


    /// A writing transaction whose first statement locks the stream's row until it commits.
    func write<T>(_ body: () throws -> T) throws -> T {
        try transaction {
            try connection.run("SELECT sequence FROM sync.stream WHERE id = 1 FOR UPDATE")
            return try body()
        }
    }

    /// The other sync processes hear of the change when it commits.
    func logged(_ change: SyncChange) throws {
        try connection.notify(Self.notifyChannel, payload: String(change.streamSequence))
    }
}
