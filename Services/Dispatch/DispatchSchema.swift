import Storage

/// The dispatcher's store: per-notification outcome counters.
enum DispatchSchema {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE outcomes (
                notification_id TEXT PRIMARY KEY,
                state TEXT NOT NULL,
                targets INTEGER NOT NULL DEFAULT 0,
                delivered INTEGER NOT NULL DEFAULT 0,
                acknowledged INTEGER NOT NULL DEFAULT 0,
                expired INTEGER NOT NULL DEFAULT 0,
                failed INTEGER NOT NULL DEFAULT 0,
                started_at REAL,
                ended_at REAL
            );
            """),
    ]
}
