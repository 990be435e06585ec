import Foundation
import HubProtocol
import Storage

/// The registry's SQLite store: installations, their tags, and the change-stream sequence.
final class RegistryStore {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE installations (
                installation_id TEXT PRIMARY KEY,
                document BLOB NOT NULL,
                user_id TEXT,
                expires_at REAL,
                updated_at REAL NOT NULL
            );
            CREATE TABLE installation_tags (
                installation_id TEXT NOT NULL REFERENCES installations(installation_id) ON DELETE CASCADE,
                tag TEXT NOT NULL,
                PRIMARY KEY (installation_id, tag)
            );
            CREATE INDEX installation_tags_by_tag ON installation_tags(tag);
            CREATE INDEX installations_by_user ON installations(user_id);
            CREATE TABLE stream (id INTEGER PRIMARY KEY CHECK (id = 1), sequence INTEGER NOT NULL);
            INSERT INTO stream (id, sequence) VALUES (1, 0);
            """),
    ]

    let database: SQLiteDatabase
    private let decoder = HubCodec.makeDecoder()

    init(database: SQLiteDatabase) {
        self.database = database
    }

    /// The sequence of the last change published.
    func sequence() throws -> UInt64 {
        UInt64(try database.queryOne("SELECT sequence FROM stream WHERE id = 1")?[0].int64 ?? 0)
    }

    /// Every installation that has not expired, with the sequence they stand at, read in one transaction.
    func snapshot(now: Date) throws -> RegistrySnapshot {
        try database.transaction {
            let rows = try database.query(
                "SELECT document FROM installations WHERE expires_at IS NULL OR expires_at > ? ORDER BY installation_id",
                [now.timeIntervalSince1970])
            let installations = try rows.map { try decoder.decode(Installation.self, from: $0[0].data ?? Data()) }
            return RegistrySnapshot(sequence: try sequence(), installations: installations)
        }
    }
}
