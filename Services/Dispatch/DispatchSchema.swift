import Storage

/// The dispatcher's store: how far it has pulled, each notification's outcome, and every
/// delivery until its agent acknowledges it or it expires.
enum DispatchSchema {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE cursor (id INTEGER PRIMARY KEY CHECK (id = 1), after INTEGER NOT NULL);
            INSERT INTO cursor (id, after) VALUES (1, 0);
            CREATE TABLE outcomes (
                notification_id TEXT PRIMARY KEY,
                state TEXT NOT NULL,
                enqueued_at REAL NOT NULL,
                started_at REAL,
                ended_at REAL,
                targets INTEGER NOT NULL DEFAULT 0,
                delivered INTEGER NOT NULL DEFAULT 0,
                acknowledged INTEGER NOT NULL DEFAULT 0,
                expired INTEGER NOT NULL DEFAULT 0,
                failed INTEGER NOT NULL DEFAULT 0
            );
            CREATE TABLE deliveries (
                delivery_id TEXT PRIMARY KEY,
                notification_id TEXT NOT NULL,
                installation_id TEXT NOT NULL,
                template TEXT,
                payload TEXT NOT NULL,
                expires_at REAL NOT NULL,
                delivered_at REAL,
                acked_at REAL
            );
            CREATE INDEX deliveries_pending ON deliveries(installation_id, acked_at);
            CREATE INDEX deliveries_by_expiry ON deliveries(expires_at) WHERE acked_at IS NULL;
            """),
        Migration(
            version: 2,
            """
            ALTER TABLE deliveries ADD COLUMN rich BLOB;
            ALTER TABLE deliveries ADD COLUMN failed_reason TEXT;
            """),
        // A broadcast's deliveries share their payload: stored once per notification and body.
        Migration(
            version: 3,
            """
            CREATE TABLE payloads (id INTEGER PRIMARY KEY, notification_id TEXT NOT NULL, body TEXT NOT NULL);
            ALTER TABLE deliveries ADD COLUMN payload_id INTEGER;
            """),
        // Outcomes per platform: each platform's targets, and what became of deliveries to a
        // platform without a delivery path.
        Migration(
            version: 4,
            """
            CREATE TABLE platform_outcomes (
                notification_id TEXT NOT NULL,
                platform TEXT NOT NULL,
                outcome TEXT NOT NULL,
                count INTEGER NOT NULL,
                PRIMARY KEY (notification_id, platform, outcome)
            );
            """),
        // What became of each of a test send's first targets.
        Migration(
            version: 5,
            """
            CREATE TABLE test_results (
                delivery_id TEXT PRIMARY KEY,
                notification_id TEXT NOT NULL,
                installation_id TEXT NOT NULL,
                platform TEXT NOT NULL,
                push_channel TEXT NOT NULL,
                outcome TEXT,
                success INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX test_results_by_notification ON test_results(notification_id);
            """),
        // Deliveries to phones and browsers go through their platform's push service: what it needs
        // to send them again after a restart. A Linux agent's delivery leaves these empty.
        Migration(
            version: 6,
            """
            ALTER TABLE deliveries ADD COLUMN platform TEXT;
            ALTER TABLE deliveries ADD COLUMN push_channel TEXT;
            ALTER TABLE deliveries ADD COLUMN headers TEXT;
            CREATE INDEX deliveries_push ON deliveries(platform) WHERE platform IS NOT NULL AND acked_at IS NULL;
            """),
    ]
}
