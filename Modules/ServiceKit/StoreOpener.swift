import Foundation
import Storage

/// Opens a service's store: a SQLite file in its data folder, or the PostgreSQL server the
/// config's `store` names. What it opens is closed at the runtime's shutdown.
public struct StoreOpener {
    let runtime: ServiceRuntime

    public init(runtime: ServiceRuntime) {
        self.runtime = runtime
    }

    /// Opens (creating if needed) the database `fileName` in the data folder and migrates it.
    /// `synchronous` is FULL for what must survive power loss once acknowledged to a sender;
    /// NORMAL for state that can be rebuilt from another service's store, which WAL keeps intact.
    /// Its log is copied into the file by a thread of its own (`BackgroundCheckpointer`), so that
    /// a service's loop seldom stalls on a checkpoint inside a commit.
    public func open(_ fileName: String, migrations: [Migration], synchronous: String = "FULL") throws -> SQLiteDatabase {
        let path = runtime.dataDirectory.appendingPathComponent(fileName).path
        let database = try SQLiteDatabase(
            path: path, options: SQLiteDatabase.Options(synchronous: synchronous, maxBytes: runtime.config.limits.storeBytes))
        try database.migrate(migrations)
        let checkpointer = try BackgroundCheckpointer(for: database)
        runtime.onShutdown {
            checkpointer.stop()
            database.close()
        }
        runtime.logger.info("store open", ("path", path), ("schema", try database.schemaVersion))
        return database
    }

    /// The store on the engine `store` names: `postgres` with the URL when it names a PostgreSQL
    /// server (a failure there is a config error), else `sqlite`.
    public func choose<Store>(schema: String, postgres: (String) throws -> Store, sqlite: () throws -> Store) throws -> Store {
        guard runtime.config.storeIsPostgres, let url = runtime.config.store else { return try sqlite() }
        let store: Store
        do {
            store = try postgres(url)
        } catch {
            throw ConfigError("store: cannot use the PostgreSQL store: \(error)")
        }
        runtime.logger.info("store open", ("engine", "postgresql"), ("schema", schema))
        return store
    }
}
