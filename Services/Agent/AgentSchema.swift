import Storage

/// The agent's local store: its settings (identity, chosen categories) and the deliveries it has shown.
enum AgentSchema {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE seen (delivery_id TEXT PRIMARY KEY, notification_id TEXT NOT NULL, seen_at REAL NOT NULL);
            CREATE TABLE user_cache (id TEXT PRIMARY KEY, document BLOB NOT NULL, desktop_id INTEGER);
            CREATE TABLE rich_pending (
                delivery_id TEXT PRIMARY KEY, delivery BLOB NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                next_at REAL NOT NULL, last_error TEXT
            );
            CREATE TABLE rich_cache (sha256 TEXT PRIMARY KEY, path TEXT NOT NULL, expires_at REAL NOT NULL);
            """),
        // The notification server instance (its unique bus name) a user's notification's popup was
        // shown on: its popup id means something only there.
        Migration(version: 2, "ALTER TABLE user_cache ADD COLUMN desktop_owner TEXT;"),
        // What a person did to popups, in order, until the sync store has taken it.
        Migration(
            version: 3,
            "CREATE TABLE pending_actions (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, action TEXT NOT NULL, at REAL NOT NULL);"),
        // Apps registered with the agent as their UnifiedPush distributor, each by its connection
        // token, with its endpoint's secret; and the push messages on their way to them, in order.
        // `held`: acknowledged to the hub while the app could not be reached (or the device's power
        // asks for more urgency than it has); it is the agent's to hand over. `urgency`: 0 very-low to 3 high.
        Migration(
            version: 4,
            """
            CREATE TABLE apps (
                token TEXT PRIMARY KEY, service TEXT NOT NULL, description TEXT, vapid TEXT, connector INTEGER NOT NULL,
                secret TEXT NOT NULL, endpoint_id TEXT NOT NULL UNIQUE, registered_at REAL NOT NULL
            );
            CREATE TABLE app_messages (
                seq INTEGER PRIMARY KEY AUTOINCREMENT, delivery_id TEXT NOT NULL UNIQUE, notification_id TEXT NOT NULL,
                endpoint_id TEXT NOT NULL, message BLOB NOT NULL, urgency INTEGER NOT NULL DEFAULT 2, expires_at REAL NOT NULL,
                held INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX app_messages_by_endpoint ON app_messages(endpoint_id, seq);
            """),
        // Notifications this device changed (read, dismissed, deleted…) whose change it has not
        // yet fetched back from the store: one the store never hands back was lost in a failover.
        Migration(version: 5, "CREATE TABLE own_changes (id TEXT PRIMARY KEY, at REAL NOT NULL);"),
    ]
}
