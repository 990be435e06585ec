import Storage

/// The publish service's store: accepted notifications in acceptance order, keyed by id and by
/// the sender's idempotency key.
public enum PublishSchema {
    public static let migrations = [
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
        Migration(
            version: 2,
            """
            CREATE TABLE rich_blobs (
                sha256 TEXT PRIMARY KEY,
                content_type TEXT NOT NULL,
                size INTEGER NOT NULL,
                expires_at REAL NOT NULL
            );
            CREATE INDEX rich_blobs_by_expiry ON rich_blobs(expires_at);
            """),
        Migration(
            version: 3,
            """
            CREATE TABLE scheduled (
                notification_id TEXT PRIMARY KEY,
                idempotency_key TEXT UNIQUE,
                send BLOB NOT NULL,
                fire_at REAL NOT NULL,
                state TEXT NOT NULL,
                enqueued_at REAL NOT NULL
            );
            CREATE INDEX scheduled_due ON scheduled(fire_at) WHERE state = 'Scheduled';
            """),
        // Why a scheduled send was abandoned: it no longer validated when its time came.
        Migration(version: 4, "ALTER TABLE scheduled ADD COLUMN failed_reason TEXT;"),
    ]
}
