import Storage

/// The sync store: per-user notifications with the per-user sequence of their last change, and
/// tombstones for deleted and expired ones, kept long enough for every device to see them.
enum SyncSchema {
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
    ]
}
