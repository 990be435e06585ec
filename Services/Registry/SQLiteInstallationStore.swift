import Foundation
import HubProtocol
import Storage

/// The registry's store on SQLite, the embedded default: installations, their tags, the
/// change-stream sequence and the log of recent changes. Every change bumps the sequence and is
/// logged in the same transaction, so the stream's numbers are durable.
final class SQLiteInstallationStore: InstallationStore {
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
            CREATE INDEX installations_by_expiry ON installations(expires_at) WHERE expires_at IS NOT NULL;
            CREATE TABLE stream (id INTEGER PRIMARY KEY CHECK (id = 1), sequence INTEGER NOT NULL);
            INSERT INTO stream (id, sequence) VALUES (1, 0);
            """),
        Migration(
            version: 2,
            """
            ALTER TABLE installations ADD COLUMN push_channel TEXT;
            UPDATE installations SET push_channel = json_extract(CAST(document AS TEXT), '$.pushChannel');
            CREATE INDEX installations_by_channel ON installations(push_channel);
            """),
        // The change stream is published from this log, in sequence order, whichever process
        // made the change.
        Migration(
            version: 3,
            """
            CREATE TABLE changes (sequence INTEGER PRIMARY KEY, installation_id TEXT NOT NULL, document BLOB);
            """),
    ]

    let database: SQLiteDatabase
    private let decoder = HubCodec.makeDecoder()
    private let encoder = HubCodec.makeEncoder()

    init(database: SQLiteDatabase) {
        self.database = database
    }

    /// The sequence of the last change.
    func sequence() throws -> UInt64 {
        UInt64(try database.queryOne("SELECT sequence FROM stream WHERE id = 1")?[0].int64 ?? 0)
    }

    private func nextSequence() throws -> UInt64 {
        try database.run("UPDATE stream SET sequence = sequence + 1 WHERE id = 1")
        return try sequence()
    }

    /// A live installation, or nil when there is none or it has expired.
    func get(_ id: String, now: Date) throws -> Installation? {
        guard let row = try database.queryOne(
            "SELECT document FROM installations WHERE installation_id = ? AND (expires_at IS NULL OR expires_at > ?)",
            [id, now.timeIntervalSince1970])
        else { return nil }
        return try decode(row[0])
    }

    /// Creates or replaces an installation, keeping its creation time. Returns it as stored and the change's sequence.
    func upsert(_ installation: Installation, now: Date) throws -> (Installation, UInt64) {
        try database.transaction {
            var stored = installation
            let existing = try database.queryOne(
                "SELECT document FROM installations WHERE installation_id = ?", [installation.installationId])
            stored.createdAt = try existing.map { try decode($0[0]).createdAt } ?? now
            stored.lastSeen = now
            let sequence = try nextSequence()
            stored.version = sequence
            // A tag given twice is kept once, where it first appears.
            var seen = Set<String>()
            stored.tags = stored.tags.filter { seen.insert($0).inserted }
            try database.run(
                """
                INSERT INTO installations (installation_id, document, user_id, expires_at, updated_at, push_channel)
                VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (installation_id) DO UPDATE SET document = excluded.document, user_id = excluded.user_id,
                    expires_at = excluded.expires_at, updated_at = excluded.updated_at, push_channel = excluded.push_channel
                """,
                [stored.installationId, try encoder.encode(stored), stored.userId,
                 stored.expirationTime?.timeIntervalSince1970, now.timeIntervalSince1970, stored.pushChannel])
            try database.run("DELETE FROM installation_tags WHERE installation_id = ?", [stored.installationId])
            for tag in stored.tags {
                try database.run("INSERT INTO installation_tags (installation_id, tag) VALUES (?, ?)", [stored.installationId, tag])
            }
            try log(sequence, stored.installationId, stored)
            return (stored, sequence)
        }
    }

    /// Deletes an installation. Returns the change's sequence, or nil when there was none.
    func delete(_ id: String) throws -> UInt64? {
        try database.transaction {
            guard try database.run("DELETE FROM installations WHERE installation_id = ?", [id]) > 0 else { return nil }
            let sequence = try nextSequence()
            try log(sequence, id, nil)
            return sequence
        }
    }

    /// Deletes installations whose expiration time has passed; returns each id with its change's sequence.
    func purgeExpired(now: Date) throws -> [(String, UInt64)] {
        try database.transaction {
            let ids = try database.query(
                "SELECT installation_id FROM installations WHERE expires_at IS NOT NULL AND expires_at <= ?",
                [now.timeIntervalSince1970]
            ).compactMap { $0[0].string }
            var purged: [(String, UInt64)] = []
            for id in ids {
                try database.run("DELETE FROM installations WHERE installation_id = ?", [id])
                let sequence = try nextSequence()
                try log(sequence, id, nil)
                purged.append((id, sequence))
            }
            return purged
        }
    }

    /// A page of live installations in id order, optionally only those with `tag` and/or `pushChannel`.
    func list(tag: String?, pushChannel: String? = nil, after: String?, limit: Int, now: Date) throws -> InstallationPage {
        var sql = "SELECT i.document FROM installations i"
        var values: [SQLiteBindable] = []
        if let tag {
            sql += " JOIN installation_tags t ON t.installation_id = i.installation_id AND t.tag = ?"
            values.append(tag)
        }
        sql += " WHERE i.installation_id > ? AND (i.expires_at IS NULL OR i.expires_at > ?)"
        values += [after ?? "", now.timeIntervalSince1970]
        if let pushChannel {
            sql += " AND i.push_channel = ?"
            values.append(pushChannel)
        }
        sql += " ORDER BY i.installation_id LIMIT ?"
        values.append(limit + 1)
        return InstallationPage(fetched: try database.query(sql, values).map { try decode($0[0]) }, limit: limit)
    }

    func count(now: Date) throws -> Int {
        try database.queryOne(
            "SELECT count(*) FROM installations WHERE expires_at IS NULL OR expires_at > ?", [now.timeIntervalSince1970]
        )?[0].int ?? 0
    }

    /// Every live installation and the sequence they stand at, read in one transaction.
    func snapshot(now: Date) throws -> RegistrySnapshot {
        try database.transaction {
            let rows = try database.query(
                "SELECT document FROM installations WHERE expires_at IS NULL OR expires_at > ? ORDER BY installation_id",
                [now.timeIntervalSince1970])
            return RegistrySnapshot(sequence: try sequence(), installations: try rows.map { try decode($0[0]) })
        }
    }

    private func log(_ sequence: UInt64, _ id: String, _ installation: Installation?) throws {
        try database.run(
            "INSERT INTO changes (sequence, installation_id, document) VALUES (?, ?, ?)",
            [Int64(sequence), id, try installation.map { try encoder.encode($0) }])
    }

    func changes(after sequence: UInt64, limit: Int) throws -> [InstallationChange] {
        try database.query(
            "SELECT sequence, installation_id, document FROM changes WHERE sequence > ? ORDER BY sequence LIMIT ?",
            [Int64(sequence), limit]
        ).map { row in try InstallationChange(sequence: row[0].int64, installationId: row[1].string, document: row[2].data, decoder: decoder) }
    }

    func pruneChanges(keeping count: Int) throws {
        try database.run("DELETE FROM changes WHERE sequence <= (SELECT max(sequence) FROM changes) - ?", [count])
    }

    private func decode(_ value: SQLiteValue) throws -> Installation {
        try decoder.decode(Installation.self, from: value.data ?? Data())
    }
}
