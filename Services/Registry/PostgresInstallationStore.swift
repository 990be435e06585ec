import Foundation
import HubProtocol
import Postgres
import Storage

/// The registry's store on PostgreSQL, which several registry processes can share. Its tables
/// live in the schema `registry`, named in full in every statement, so that a reconnected
/// session needs no settings. The sequence is a row that each change updates first, so the
/// row's lock orders the writers of every process: sequences commit in order, without gaps, and
/// a reader of the change log never sees one before the one below it.
final class PostgresInstallationStore: InstallationStore {
    static let schema = "registry"
    static let notifyChannel = "nh_registry_changes"

    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE SCHEMA IF NOT EXISTS registry;
            CREATE TABLE registry.installations (
                installation_id TEXT PRIMARY KEY,
                document BYTEA NOT NULL,
                user_id TEXT,
                expires_at DOUBLE PRECISION,
                updated_at DOUBLE PRECISION NOT NULL,
                push_channel TEXT
            );
            CREATE TABLE registry.installation_tags (
                installation_id TEXT NOT NULL REFERENCES registry.installations(installation_id) ON DELETE CASCADE,
                tag TEXT NOT NULL,
                PRIMARY KEY (installation_id, tag)
            );
            CREATE INDEX installation_tags_by_tag ON registry.installation_tags(tag);
            CREATE INDEX installations_by_user ON registry.installations(user_id);
            CREATE INDEX installations_by_expiry ON registry.installations(expires_at) WHERE expires_at IS NOT NULL;
            CREATE INDEX installations_by_channel ON registry.installations(push_channel);
            CREATE TABLE registry.stream (id INTEGER PRIMARY KEY CHECK (id = 1), sequence BIGINT NOT NULL);
            INSERT INTO registry.stream (id, sequence) VALUES (1, 0);
            CREATE TABLE registry.changes (sequence BIGINT PRIMARY KEY, installation_id TEXT NOT NULL, document BYTEA);
            """),
    ]

    let connection: PostgresConnection
    private let decoder = HubCodec.makeDecoder()
    private let encoder = HubCodec.makeEncoder()

    /// Connects, makes the schema when it is missing, and brings it to the code's version.
    init(url: String) throws {
        connection = try PostgresConnection(url: url)
        try connection.migrate(Self.migrations, name: Self.schema)
    }

    func sequence() throws -> UInt64 {
        try connection.sequence(in: "registry.stream")
    }

    /// Takes the next sequence: the row stays locked until the change commits.
    private func nextSequence() throws -> UInt64 {
        try connection.nextSequence(in: "registry.stream")
    }

    func get(_ id: String, now: Date) throws -> Installation? {
        guard let row = try connection.queryOne(
            "SELECT document FROM registry.installations WHERE installation_id = $1 AND (expires_at IS NULL OR expires_at > $2)",
            [id, now.timeIntervalSince1970])
        else { return nil }
        return try decode(row[0])
    }

    func upsert(_ installation: Installation, now: Date) throws -> (Installation, UInt64) {
        try connection.transaction {
            let sequence = try nextSequence()
            var stored = installation
            let existing = try connection.queryOne(
                "SELECT document FROM registry.installations WHERE installation_id = $1", [installation.installationId])
            stored.createdAt = try existing.map { try decode($0[0]).createdAt } ?? now
            stored.lastSeen = now
            stored.version = sequence
            var seen = Set<String>()
            stored.tags = stored.tags.filter { seen.insert($0).inserted }
            let document = try encoder.encode(stored)
            try connection.run(
                """
                INSERT INTO registry.installations (installation_id, document, user_id, expires_at, updated_at, push_channel)
                VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (installation_id) DO UPDATE SET document = excluded.document, user_id = excluded.user_id,
                    expires_at = excluded.expires_at, updated_at = excluded.updated_at, push_channel = excluded.push_channel
                """,
                [stored.installationId, document, stored.userId, stored.expirationTime?.timeIntervalSince1970, now.timeIntervalSince1970,
                 stored.pushChannel])
            try connection.run("DELETE FROM registry.installation_tags WHERE installation_id = $1", [stored.installationId])
            if !stored.tags.isEmpty {
                try connection.run(
                    "INSERT INTO registry.installation_tags (installation_id, tag) SELECT $1, unnest($2::text[])",
                    [stored.installationId, Self.textArray(stored.tags)])
            }
            try log(sequence, stored.installationId, document)
            return (stored, sequence)
        }
    }

    func delete(_ id: String) throws -> UInt64? {
        do {
            return try connection.transaction {
                let sequence = try nextSequence()
                guard try connection.run("DELETE FROM registry.installations WHERE installation_id = $1", [id]) > 0 else {
                    // Nothing deleted: the sequence goes back with the transaction.
                    throw NothingDeleted()
                }
                try log(sequence, id, nil)
                return sequence
            }
        } catch is NothingDeleted {
            return nil
        }
    }

    private struct NothingDeleted: Error {}

    func purgeExpired(now: Date) throws -> [(String, UInt64)] {
        try connection.transaction {
            let ids = try connection.query(
                "SELECT installation_id FROM registry.installations WHERE expires_at IS NOT NULL AND expires_at <= $1 ORDER BY installation_id",
                [now.timeIntervalSince1970]
            ).compactMap { $0[0].string }
            var purged: [(String, UInt64)] = []
            for id in ids {
                let sequence = try nextSequence()
                try connection.run("DELETE FROM registry.installations WHERE installation_id = $1", [id])
                try log(sequence, id, nil)
                purged.append((id, sequence))
            }
            return purged
        }
    }

    func list(tag: String?, pushChannel: String?, after: String?, limit: Int, now: Date) throws -> InstallationPage {
        var sql = "SELECT i.document FROM registry.installations i"
        var values: [PostgresBindable?] = []
        if let tag {
            values.append(tag)
            sql += " JOIN registry.installation_tags t ON t.installation_id = i.installation_id AND t.tag = $\(values.count)"
        }
        values += [after ?? "", now.timeIntervalSince1970]
        sql += " WHERE i.installation_id COLLATE \"C\" > $\(values.count - 1) AND (i.expires_at IS NULL OR i.expires_at > $\(values.count))"
        if let pushChannel {
            values.append(pushChannel)
            sql += " AND i.push_channel = $\(values.count)"
        }
        values.append(limit + 1)
        // Ids compare byte by byte, as SQLite compares them, whatever the database's collation.
        sql += " ORDER BY i.installation_id COLLATE \"C\" LIMIT $\(values.count)"
        return InstallationPage(fetched: try connection.query(sql, values).map { try decode($0[0]) }, limit: limit)
    }

    func count(now: Date) throws -> Int {
        try connection.queryOne(
            "SELECT count(*) FROM registry.installations WHERE expires_at IS NULL OR expires_at > $1", [now.timeIntervalSince1970]
        )?[0].int ?? 0
    }

    func snapshot(now: Date) throws -> RegistrySnapshot {
        try connection.transaction {
            // One view of the installations and the sequence, whatever other processes commit meanwhile.
            try connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            let sequence = try sequence()
            let rows = try connection.query(
                "SELECT document FROM registry.installations WHERE expires_at IS NULL OR expires_at > $1 ORDER BY installation_id COLLATE \"C\"",
                [now.timeIntervalSince1970])
            return RegistrySnapshot(sequence: sequence, installations: try rows.map { try decode($0[0]) })
        }
    }

    private func log(_ sequence: UInt64, _ id: String, _ document: Data?) throws {
        try connection.run(
            "INSERT INTO registry.changes (sequence, installation_id, document) VALUES ($1, $2, $3)", [Int64(sequence), id, document])
        // Delivered to the other registry processes when the change commits.
        try connection.run("SELECT pg_notify($1, $2)", [Self.notifyChannel, String(sequence)])
    }

    func changes(after sequence: UInt64, limit: Int) throws -> [InstallationChange] {
        try connection.query(
            "SELECT sequence, installation_id, document FROM registry.changes WHERE sequence > $1 ORDER BY sequence LIMIT $2",
            [Int64(sequence), limit]
        ).map { row in try InstallationChange(sequence: row[0].int64, installationId: row[1].string, document: row[2].data, decoder: decoder) }
    }

    func pruneChanges(keeping count: Int) throws {
        try connection.run("DELETE FROM registry.changes WHERE sequence <= (SELECT max(sequence) FROM registry.changes) - $1", [count])
    }

    private func decode(_ cell: PostgresCell) throws -> Installation {
        try decoder.decode(Installation.self, from: cell.data ?? Data())
    }

    /// A text[] literal: each element quoted, with quotes and backslashes escaped.
    static func textArray(_ items: [String]) -> String {
        "{" + items.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
            .joined(separator: ",") + "}"
    }
}
