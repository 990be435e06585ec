import Foundation
import HubProtocol
import Postgres
import Storage
import StoreEngines

/// The registry's store on PostgreSQL, which several registry processes can share. Its tables
/// live in the schema `registry`, named in full in every statement, so that a reconnected
/// session needs no settings. The sequence is a row that each change updates first, so the
/// row's lock orders the writers of every process: sequences commit in order, without gaps, and
/// a reader of the change log never sees one before the one below it.
final class PostgresInstallationStore: InstallationEngine, PostgresBacked {
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
        Migration(
            version: 2,
            """
            CREATE TABLE registry.hubs (name TEXT PRIMARY KEY, document BYTEA NOT NULL);
            CREATE TABLE registry.hub_catalog (id INTEGER PRIMARY KEY CHECK (id = 1), version BIGINT NOT NULL);
            INSERT INTO registry.hub_catalog (id, version) VALUES (1, 0);
            CREATE TABLE registry.hub_generations (name TEXT PRIMARY KEY, generation BIGINT NOT NULL);
            """),
        Migration(
            version: 3,
            """
            CREATE TABLE registry.installation_endpoints (
                endpoint_id TEXT PRIMARY KEY,
                installation_id TEXT NOT NULL REFERENCES registry.installations(installation_id) ON DELETE CASCADE
            );
            CREATE INDEX installation_endpoints_by_installation ON registry.installation_endpoints(installation_id);
            INSERT INTO registry.installation_endpoints (endpoint_id, installation_id)
                SELECT e.key, i.installation_id FROM registry.installations i
                CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(convert_from(i.document, 'UTF8')::jsonb -> 'endpoints') = 'object'
                    THEN convert_from(i.document, 'UTF8')::jsonb -> 'endpoints' ELSE '{}'::jsonb END) e
                ON CONFLICT DO NOTHING;
            """),
        Migration(
            version: 4,
            """
            CREATE TABLE registry.jobs (
                job_id TEXT PRIMARY KEY,
                hub TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                document BYTEA NOT NULL,
                input_offset BIGINT NOT NULL DEFAULT 0,
                finished BOOLEAN NOT NULL DEFAULT FALSE,
                owner TEXT,
                lease_until DOUBLE PRECISION NOT NULL DEFAULT 0
            );
            CREATE TABLE registry.job_failures (
                job_id TEXT NOT NULL REFERENCES registry.jobs(job_id) ON DELETE CASCADE,
                line BIGINT NOT NULL,
                code TEXT NOT NULL,
                message TEXT NOT NULL,
                PRIMARY KEY (job_id, line)
            );
            """),
    ]

    static let sql = InstallationSQL(prefix: "registry.", byteOrder: #" COLLATE "C""#)

    let connection: PostgresConnection
    let decoder = HubCodec.makeDecoder()
    let encoder = HubCodec.makeEncoder()
    var engine: PostgresEngine { PostgresEngine(connection) }

    /// Connects, makes the schema when it is missing, and brings it to the code's version.
    /// Every session moves the sequence into the server's history before it changes anything.
    init(url: String) throws {
        connection = try PostgresConnection(url: url)
        try connection.migrate(Self.migrations, name: Self.schema)
        try connection.followHistory(counter: Self.counter)
    }

    /// The sequence's row, and its name among the store's counters (`store_history.marks`).
    static let counter = "registry.stream"


    /// Delivered to the other registry processes when the change commits.
    func logged(_ sequence: UInt64) throws {
        try connection.notify(Self.notifyChannel, payload: String(sequence))
    }

    func live(_ ids: [String], now: Date) throws -> [String: Installation] {
        var found: [String: Installation] = [:]
        for row in try connection.query(Self.liveOfIds, [PostgresValue.textArray(ids), now]) {
            let installation = try decoder.decode(Installation.self, from: try row.data("document", of: "installations"))
            found[installation.installationId] = installation
        }
        return found
    }

    /// Many installations in a statement for each table: a round trip each, whatever their number.
    func upsert(all installations: [Installation], now: Date) throws {
        guard !installations.isEmpty else { return }
        try transaction {
            let ids = installations.map(\.installationId)
            // The sequence moves by their number at once, its row locked until the commit as for one.
            let last = try oneRow(Self.advanceSequence, [installations.count]).sequence("sequence", of: "stream")
            let stored = try connection.query(Self.storedOfIds, [PostgresValue.textArray(ids)]).map { try $0.data("document", of: "installations") }
            var documents: [Data?] = [], sequences: [String?] = [], users: [String?] = [], expiries: [String?] = [], channels: [String?] = []
            var tagIds: [String?] = [], tags: [String?] = []
            for (installation, sequence, document) in try stamped(installations, last: last, storedDocuments: stored, now: now) {
                documents.append(document)
                sequences.append(String(sequence))
                users.append(installation.userId)
                expiries.append(installation.expirationTime.map { String($0.timeIntervalSince1970) })
                channels.append(installation.pushChannel)
                for tag in installation.tags {
                    tagIds.append(installation.installationId)
                    tags.append(tag)
                }
            }
            let idArray = PostgresValue.textArray(ids)
            _ = try connection.run(Self.upsertArrays, [
                idArray, PostgresValue.byteaArray(documents), PostgresValue.textArray(users), PostgresValue.textArray(expiries), now,
                PostgresValue.textArray(channels),
            ])
            _ = try connection.run("DELETE FROM registry.installation_tags WHERE installation_id = ANY($1::text[])", [idArray])
            if !tags.isEmpty {
                _ = try connection.run("INSERT INTO registry.installation_tags (installation_id, tag) SELECT * FROM unnest($1::text[], $2::text[])",
                        [PostgresValue.textArray(tagIds), PostgresValue.textArray(tags)])
            }
            _ = try connection.run("DELETE FROM registry.installation_endpoints WHERE installation_id = ANY($1::text[])", [idArray])
            _ = try connection.run("INSERT INTO registry.changes (sequence, installation_id, document) SELECT * FROM unnest($1::bigint[], $2::text[], $3::bytea[])",
                    [PostgresValue.textArray(sequences), idArray, PostgresValue.byteaArray(documents)])
            try logged(last)
        }
    }

    static let advanceSequence = "UPDATE registry.stream SET sequence = sequence + $1 WHERE id = 1 RETURNING sequence"
    static let storedOfIds = "SELECT document FROM registry.installations WHERE installation_id = ANY($1::text[])"
    static let liveOfIds = """
        SELECT document FROM registry.installations WHERE installation_id = ANY($1::text[]) AND (expires_at IS NULL OR expires_at > $2)
        """
    /// (ids, documents, users, expiries, now, push channels).
    static let upsertArrays = """
        INSERT INTO registry.installations (installation_id, document, user_id, expires_at, updated_at, push_channel)
        SELECT given.id, given.document, given.user_id, given.expires_at, $5, given.push_channel
        FROM unnest($1::text[], $2::bytea[], $3::text[], $4::float8[], $6::text[]) AS given(id, document, user_id, expires_at, push_channel)
        ON CONFLICT (installation_id) DO UPDATE SET document = excluded.document, user_id = excluded.user_id,
            expires_at = excluded.expires_at, updated_at = excluded.updated_at, push_channel = excluded.push_channel
        """

    func insertTags(_ tags: [String], of id: String) throws {
        try run("INSERT INTO registry.installation_tags (installation_id, tag) SELECT $1, unnest($2::text[])", [id, Self.textArray(tags)])
    }

    /// A text[] literal: each element quoted, with quotes and backslashes escaped.
    static func textArray(_ items: [String]) -> String {
        "{" + items.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
            .joined(separator: ",") + "}"
    }
}
