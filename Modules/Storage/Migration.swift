/// One step of a schema: the version it brings the database to, and the SQL that does it.
public struct Migration: Sendable {
    public let version: Int
    public let sql: String

    public init(version: Int, _ sql: String) {
        self.version = version
        self.sql = sql
    }
}

extension SQLiteDatabase {
    /// Brings the schema up to the last migration, each step in its own transaction, recording the
    /// version in PRAGMA user_version. A database newer than the code is refused rather than guessed at.
    public func migrate(_ migrations: [Migration]) throws {
        let ordered = migrations.sorted { $0.version < $1.version }
        precondition(Set(ordered.map(\.version)).count == ordered.count, "migration versions must be unique")
        let current = try schemaVersion
        if let latest = ordered.last?.version, current > latest {
            throw StorageError(
                code: 1, message: "schema version \(current) is newer than this build knows (\(latest)); upgrade the service",
                operation: "migrate \(path)")
        }
        for migration in ordered where migration.version > current {
            try transaction {
                // Another process opening the same fresh store may have taken this step meanwhile.
                guard try schemaVersion < migration.version else { return }
                try execute(migration.sql)
                try execute("PRAGMA user_version = \(migration.version)")
            }
        }
    }
}
