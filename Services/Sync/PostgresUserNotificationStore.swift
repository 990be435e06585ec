import Foundation
import HubProtocol
import Postgres
import ServiceKit
import Storage
import StoreEngines

/// The sync store on PostgreSQL, which several sync processes can share. Its tables live in the
/// schema `sync`, named in full in every statement, so that a reconnected session needs no
/// settings. Every writing transaction locks the stream's row first, so the row's lock orders the
/// writers of every process: per-user and stream sequences are taken in turn, commit in order and
/// without gaps, and what a writer reads after the lock is what the writer before it committed.
/// Each call commits its own transaction, durable once it returns.
final class PostgresUserNotificationStore: UserNotificationEngine, PostgresBacked {
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
        // A user's encryption key (its public part) and pairings under way (`UserVault`).
        Migration(
            version: 2,
            """
            CREATE TABLE sync.user_vault (
                user_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, expires_at DOUBLE PRECISION, PRIMARY KEY (user_id, name)
            );
            CREATE INDEX user_vault_by_expiry ON sync.user_vault(expires_at) WHERE expires_at IS NOT NULL;
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
    /// Every session moves the stream's sequence into the server's history before it writes; each
    /// user's sequence moves at that user's next change (`nextUserSequence`).
    init(url: String) throws {
        connection = try PostgresConnection(url: url)
        try connection.migrate(Self.migrations, name: Self.schema)
        try connection.followHistory(counter: Self.counter)
    }

    /// The stream's sequence row, and its name among the store's counters (`store_history.marks`).
    static let counter = "sync.stream"

    /// A user's sequence's name among the store's counters.
    static func counter(user: String) -> String { "sync.users/" + user }

    /// (user, the history's base) → (sequence: the user's next, prior: where it stood before, 0 for a
    /// new user). A user's sequence still in an older history moves to the history's base first.
    static let nextUserSequence = """
        WITH prior AS (SELECT sequence FROM sync.users WHERE user_id = $1)
        INSERT INTO sync.users AS u (user_id, sequence) VALUES ($1, $2::bigint + 1)
        ON CONFLICT (user_id) DO UPDATE SET sequence = greatest(u.sequence, $2::bigint) + 1
        RETURNING sequence, coalesce((SELECT sequence FROM prior), 0) AS prior
        """

    /// Writers take their turns under the stream row's lock, so where the user's sequence stood is
    /// what the last writer left; a move into a new history is marked in the same transaction.
    func nextUserSequence(_ user: String) throws -> UInt64 {
        let history = connection.history
        let base = history?.base ?? 0
        let row = try oneRow(Self.nextUserSequence, [user, Int64(base)])
        // A user new to this history is marked at 0: a device whose cursor came from a user the
        // replica never had holds only what was lost.
        let prior = try row.sequence("prior", of: "users")
        if let history, base > 0, prior < base {
            try connection.mark(Self.counter(user: user), epoch: history.epoch, previous: prior)
        }
        return try row.sequence("sequence", of: "users")
    }

    /// A cursor of the current history (or a later one) has no mark to check against.
    func check(_ cursor: UInt64, user: String, latest: UInt64) throws -> HistoryNumbering.Position {
        if HistoryNumbering.epoch(of: cursor) >= connection.history?.epoch ?? 0 {
            return HistoryNumbering.check(cursor, latest: latest, nextMark: nil)
        }
        return try connection.check(cursor, of: Self.counter(user: user), latest: latest)
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
