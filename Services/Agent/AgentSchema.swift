import Storage

/// The agent's local store: its settings (chosen categories, cursor) and the ids it has shown.
enum AgentSchema {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE seen (notification_id TEXT PRIMARY KEY, seen_at REAL NOT NULL);
            """),
    ]
}
