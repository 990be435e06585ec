import HubProtocol
import Storage

extension PostgresConnection {
    /// The advisory lock that migrations hold: one for the whole database, so two processes
    /// migrating at once (or two stores creating nh_migrations) take turns.
    static let migrationLock: Int64 = 0x6E68_5F6D_6967_72

    /// Brings the schema called `name` up to the last migration, each step in its own transaction
    /// under an advisory lock, recording the version in the table nh_migrations (in the first schema
    /// of the search path). A step another process applied meanwhile is skipped; a database newer
    /// than the code is refused rather than guessed at.
    public func migrate(_ migrations: [Migration], name: String) throws {
        let ordered = migrations.sorted { $0.version < $1.version }
        precondition(Set(ordered.map(\.version)).count == ordered.count, "migration versions must be unique")
        let latest = ordered.last?.version
        func lockedVersion() throws(PostgresError) -> Int {
            try run("SELECT pg_advisory_xact_lock($1)", [Self.migrationLock])
            let current = try schemaVersion(name: name)
            if let latest, current > latest {
                throw PostgresError(
                    message: "schema \(name) is at version \(current), newer than this build knows (\(latest)); upgrade the service",
                    operation: "migrate \(name) on \(target)")
            }
            return current
        }
        let current = try transaction {
            try run("SELECT pg_advisory_xact_lock($1)", [Self.migrationLock])
            try execute("CREATE TABLE IF NOT EXISTS nh_migrations (name text PRIMARY KEY, version integer NOT NULL)")
            return try lockedVersion()
        }
        for migration in ordered where migration.version > current {
            try transaction {
                guard try lockedVersion() < migration.version else { return }
                try execute(migration.sql)
                try run(
                    """
                    INSERT INTO nh_migrations (name, version) VALUES ($1, $2)
                    ON CONFLICT (name) DO UPDATE SET version = excluded.version
                    """, [name, migration.version])
            }
        }
    }

    /// The version the migrations called `name` reached; 0 before the first.
    public func schemaVersion(name: String) throws(PostgresError) -> Int {
        let sql = "SELECT version FROM nh_migrations WHERE name = $1"
        guard try exists("nh_migrations"), let row = try queryOne(sql, [name]) else { return 0 }
        return try row.reading(sql) { row throws(HubError) in try row.int("version", of: "nh_migrations") }
    }

    /// Whether the table `name` (schema-qualified, or else on the search path) exists.
    func exists(_ name: String) throws(PostgresError) -> Bool {
        try queryRow("SELECT to_regclass($1) IS NOT NULL AS present", [name]) { row throws(HubError) in try row.bool("present", of: name) }
    }
}
