import Auth
import Foundation
import HubProtocol
import Postgres
import ServiceKit

/// `nh-registry`'s entry point, called by its executable and by `nh-services` (Services/Executables).
public enum RegistryMain {
    public static func main(_ arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> Never {
        ServiceMain.run(name: "nh-registry", summary: "the registration service: installations, tags and templates", arguments: arguments) { context in
            let config = context.config
            let store: any InstallationStore = try context.stores.choose(
                schema: PostgresInstallationStore.schema, postgres: { try PostgresInstallationStore(url: $0) },
                sqlite: { SQLiteInstallationStore(database: try context.stores.open("registry.db", migrations: SQLiteInstallationStore.migrations)) })
            try context.prepareKeys()
            let events = try context.bus.bindEvents(config.registry.events ?? "tcp://127.0.0.1:7702", startingAfter: try store.sequence())
            var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
            let history = StoreHistoryWatch(store, logger: context.logger)
            let server = try context.bus.bindRequests(config.registry.requests, endpoints: { endpoints }) {
                ["installations": ServiceRuntime.figure { try store.count(now: Date()) }, "sequence": String(events.sequence)]
                    .merging(history.details) { $1 }
            }
            endpoints["requests"] = server.endpoint

            let log = ChangeLog(
                events, topic: "installation", read: { try store.changes(after: $0, limit: $1) }, sequence: \.sequence,
                body: \.body)
            let handlers = RegistryHandlers(context: context, store: store, publishChanges: log.publish)
            handlers.install(on: server)
            JobRunner(context: context, store: store, handlers: handlers, publishChanges: log.publish).install(on: server)
            let hubs = HubHandlers(context: context, store: store, publishChanges: log.publish)
            hubs.install(on: server)
            try hubs.refresh()
            // Hubs made or changed by another registry process sharing the store.
            context.loop.every(milliseconds: Int(HubCatalogFollower.interval * 1000)) { try hubs.refresh() }

            // A store that failed over to a replica that was behind has lost the changes it had not passed
            // on: the stream goes on above them, and its readers take a snapshot of what the store holds.
            history.keep(
                log, counter: PostgresInstallationStore.counter, latest: store.sequence, loop: context.loop,
                lost: "installation changes {}, made before the failover and absent now", next: "readers take a snapshot")

            // Other registry processes sharing the store: PostgreSQL announces their changes (LISTEN/NOTIFY).
            if store is PostgresInstallationStore, let url = config.store {
                let channel = PostgresInstallationStore.notifyChannel
                let listener = try PostgresListener(url: url, channel: channel, report: context.logger.listening(on: channel))
                context.onShutdown { listener.close() }
                log.follow(notices: listener.poll, loop: context.loop, heartbeatMs: config.heartbeatMs)
            }

            // Expired installations stop receiving at once (reads skip them) and are purged here.
            context.loop.every(milliseconds: 5_000) {
                for (id, _) in try store.purgeExpired(now: Date()) { context.logger.info("installation expired", ("id", id)) }
                try log.publish()
                // A reader further behind than this takes a snapshot, as after any gap.
                try store.pruneChanges(keeping: 100_000)
            }
        }
    }
}
