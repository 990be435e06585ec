import Storage

/// The sync store: per-user notifications, and the change stream's sequence.
enum SyncSchema {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE user_notifications (
                id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                app_notification_id TEXT NOT NULL,
                document BLOB NOT NULL,
                sequence INTEGER NOT NULL,
                deleted INTEGER NOT NULL DEFAULT 0,
                expires_at REAL NOT NULL,
                UNIQUE (user_id, app_notification_id)
            );
            CREATE INDEX user_notifications_by_sequence ON user_notifications(user_id, sequence);
            CREATE TABLE stream (id INTEGER PRIMARY KEY CHECK (id = 1), sequence INTEGER NOT NULL);
            INSERT INTO stream (id, sequence) VALUES (1, 0);
            """),
    ]
}
