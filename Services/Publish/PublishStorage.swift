import Foundation
import Postgres
import ServiceKit

/// The publish service's stores on the configured engine, and the group its requests commit in.
enum PublishStorage {
    /// Sends waiting at once share one commit, on either engine (`PublishStore.group`); hints go
    /// out, and replies back, only after it. (On PostgreSQL the sequence row stays locked until the
    /// group commits, so another publish process's sends wait for it, and numbers still commit in order.)
    static func open(_ context: ServiceContext) throws -> (store: any PublishStore, rich: any RichStore, group: CommitGroup) {
        try context.stores.choose(
            schema: PostgresPublishStore.schema,
            postgres: { url in
                let postgres = try PostgresPublishStore(url: url)
                context.onShutdown { postgres.connection.close() }
                return (postgres, PostgresRichStore(connection: postgres.connection), CommitGroup(transaction: postgres.group))
            },
            sqlite: {
                let sqlite = SQLitePublishStore(database: try context.stores.open("publish.db", migrations: PublishSchema.migrations))
                let rich = try SQLiteRichStore(database: sqlite.database, directory: context.dataDirectory.appendingPathComponent("rich"))
                return (sqlite, rich, CommitGroup(transaction: sqlite.group))
            })
    }
}
