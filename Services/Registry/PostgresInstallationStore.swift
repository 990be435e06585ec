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

    func insertTags(_ tags: [String], of id: String) throws {
        try run("INSERT INTO registry.installation_tags (installation_id, tag) SELECT $1, unnest($2::text[])", [id, Self.textArray(tags)])
    }

    /// A text[] literal: each element quoted, with quotes and backslashes escaped.
    static func textArray(_ items: [String]) -> String {
        "{" + items.map { "\"" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\"" }
            .joined(separator: ",") + "}"
    }
}
