import Foundation
import HubProtocol
import Postgres
import Storage
import StoreEngines

/// The registry's store on SQLite, the embedded default: installations, their tags, the
/// change-stream sequence and the log of recent changes. Every change bumps the sequence and is
/// logged in the same transaction, so the stream's numbers are durable.
final class SQLiteInstallationStore: InstallationEngine {
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
        // The namespace's hubs (those with policies of their own) and the catalog's version.
        Migration(
            version: 4,
            """
            CREATE TABLE hubs (name TEXT PRIMARY KEY, document BLOB NOT NULL);
            CREATE TABLE hub_catalog (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
            INSERT INTO hub_catalog (id, version) VALUES (1, 0);
            CREATE TABLE hub_generations (name TEXT PRIMARY KEY, generation INTEGER NOT NULL);
            """),
        // Which installation holds each apps' push endpoint, for endpoints that name none.
        Migration(
            version: 5,
            """
            CREATE TABLE installation_endpoints (
                endpoint_id TEXT PRIMARY KEY,
                installation_id TEXT NOT NULL REFERENCES installations(installation_id) ON DELETE CASCADE
            );
            CREATE INDEX installation_endpoints_by_installation ON installation_endpoints(installation_id);
            INSERT OR IGNORE INTO installation_endpoints (endpoint_id, installation_id)
                SELECT e.key, i.installation_id FROM installations i, json_each(CAST(i.document AS TEXT), '$.endpoints') e;
            """),
        // Bulk jobs: each with the offset of its input read and applied so far, and its input's
        // lines that could not be applied.
        Migration(
            version: 6,
            """
            CREATE TABLE jobs (
                job_id TEXT PRIMARY KEY,
                hub TEXT NOT NULL,
                created_at REAL NOT NULL,
                document BLOB NOT NULL,
                input_offset INTEGER NOT NULL DEFAULT 0,
                finished INTEGER NOT NULL DEFAULT 0,
                owner TEXT,
                lease_until REAL NOT NULL DEFAULT 0
            );
            CREATE TABLE job_failures (
                job_id TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
                line INTEGER NOT NULL,
                code TEXT NOT NULL,
                message TEXT NOT NULL,
                PRIMARY KEY (job_id, line)
            );
            """),
    ]

    static let sql = InstallationSQL(prefix: "", byteOrder: "", spell: NumberedParameters.sqlite)

    let database: SQLiteDatabase
    let decoder = HubCodec.makeDecoder()
    let encoder = HubCodec.makeEncoder()
    var engine: SQLiteEngine { SQLiteEngine(database) }

    init(database: SQLiteDatabase) {
        self.database = database
    }

    func logged(_ sequence: UInt64) throws {}

    /// Many installations with a statement per table for up to 64 of them: each statement's own
    /// cost, and the binding of its values, shared.
    func upsert(all installations: [Installation], now: Date) throws {
        guard !installations.isEmpty else { return }
        try transaction {
            let ids = String(decoding: try encoder.encode(installations.map(\.installationId)), as: UTF8.self)
            let last = try oneRow("UPDATE stream SET sequence = sequence + ?1 WHERE id = 1 RETURNING sequence", [installations.count])
                .sequence("sequence", of: "stream")
            let stored = try query("SELECT document FROM installations WHERE installation_id IN (SELECT value FROM json_each(?1))", [ids])
                .map { try $0.data("document", of: "installations") }
            var rows: [[(any StoreValue)?]] = [], tags: [[(any StoreValue)?]] = [], changes: [[(any StoreValue)?]] = []
            for (installation, sequence, document) in try stamped(installations, last: last, storedDocuments: stored, now: now) {
                rows.append([installation.installationId, document, installation.userId, installation.expirationTime, now, installation.pushChannel])
                for tag in installation.tags { tags.append([installation.installationId, tag]) }
                changes.append([Int64(sequence), installation.installationId, document])
            }
            try runMany("""
                INSERT INTO installations (installation_id, document, user_id, expires_at, updated_at, push_channel) VALUES {}
                ON CONFLICT (installation_id) DO UPDATE SET document = excluded.document, user_id = excluded.user_id,
                    expires_at = excluded.expires_at, updated_at = excluded.updated_at, push_channel = excluded.push_channel
                """, rows)
            try run("DELETE FROM installation_tags WHERE installation_id IN (SELECT value FROM json_each(?1))", [ids])
            try runMany("INSERT INTO installation_tags (installation_id, tag) VALUES {}", tags)
            try run("DELETE FROM installation_endpoints WHERE installation_id IN (SELECT value FROM json_each(?1))", [ids])
            try runMany("INSERT INTO changes (sequence, installation_id, document) VALUES {}", changes)
        }
    }

    /// `statement` with `{}` standing for its VALUES, run for up to 64 rows at a time.
    private func runMany(_ statement: String, _ rows: [[(any StoreValue)?]]) throws {
        var start = 0
        while start < rows.count {
            let chunk = rows[start..<min(start + 64, rows.count)]
            let width = chunk.first?.count ?? 0
            let values = (0..<chunk.count).map { row in "(" + (1...width).map { "?\(row * width + $0)" }.joined(separator: ", ") + ")" }
            try run(statement.replacingOccurrences(of: "{}", with: values.joined(separator: ", ")), Array(chunk.joined()))
            start += 64
        }
    }

    func insertTags(_ tags: [String], of id: String) throws {
        for tag in tags { try run("INSERT INTO installation_tags (installation_id, tag) VALUES (?, ?)", [id, tag]) }
    }
}
