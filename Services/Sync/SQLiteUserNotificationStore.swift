import Foundation
import HubProtocol
import Postgres
import ServiceKit
import Storage
import StoreEngines

/// The sync store on SQLite, the embedded default. Its writes join the service's commit group:
/// the requests waiting at once share one transaction and one sync to disk, and the stream is
/// published from the log once the group has committed.
final class SQLiteUserNotificationStore: UserNotificationEngine {
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
        // A user's encryption key (its public part) and pairings under way (`UserVault`).
        Migration(
            version: 3,
            """
            CREATE TABLE user_vault (user_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, expires_at REAL, PRIMARY KEY (user_id, name));
            CREATE INDEX user_vault_by_expiry ON user_vault(expires_at) WHERE expires_at IS NOT NULL;
            """),
    ]

    static let sql = UserNotificationSQL(
        prefix: "",
        expiring: "SELECT id, user_id FROM user_notifications WHERE deleted_at IS NULL AND expires_at <= $1 ORDER BY user_id",
        raiseFloors: """
            UPDATE users SET floor = max(floor, (SELECT max(sequence) FROM user_notifications t
                WHERE t.user_id = users.user_id AND t.deleted_at IS NOT NULL AND t.deleted_at < $1))
            WHERE user_id IN (SELECT user_id FROM user_notifications WHERE deleted_at IS NOT NULL AND deleted_at < $1)
            """,
        spell: NumberedParameters.sqlite)

    let database: SQLiteDatabase
    let commitGroup: CommitGroup?
    let encoder = HubCodec.makeEncoder()
    let decoder = HubCodec.makeDecoder()
    var engine: SQLiteEngine { SQLiteEngine(database) }

    init(database: SQLiteDatabase) {
        self.database = database
        commitGroup = CommitGroup(database: database)
    }


    /// A write joins the open commit group.
    func write<T>(_ body: () throws -> T) throws -> T { try transaction(body) }
    func logged(_ change: SyncChange) throws {}
}
