import Storage

/// The publish service's store: accepted notifications, keyed by id and by the sender's idempotency key.
enum PublishSchema {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE notifications (
                notification_id TEXT PRIMARY KEY,
                idempotency_key TEXT UNIQUE,
                request BLOB NOT NULL,
                state TEXT NOT NULL,
                enqueued_at REAL NOT NULL,
                scheduled_at REAL,
                expires_at REAL NOT NULL
            );
            CREATE INDEX notifications_by_state ON notifications(state, scheduled_at);
            """),
    ]
}
