import Storage

/// The publish service's store: accepted notifications in acceptance order, keyed by id and by
/// the sender's idempotency key.
enum PublishSchema {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE notifications (
                sequence INTEGER PRIMARY KEY AUTOINCREMENT,
                notification_id TEXT NOT NULL UNIQUE,
                idempotency_key TEXT UNIQUE,
                send BLOB NOT NULL,
                state TEXT NOT NULL,
                enqueued_at REAL NOT NULL,
                expires_at REAL NOT NULL
            );
            CREATE INDEX notifications_by_expiry ON notifications(expires_at);
            """),
    ]
}
