import Auth
import Foundation
import HubProtocol
import Postgres
import ServiceKit
import Storage

/// `nh-sync`'s entry point, called by its executable and by `nh-services` (Services/Executables).
public enum SyncMain {
    public static func main(_ arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> Never {
        ServiceMain.run(name: "nh-sync", summary: "the sync store: per-user notifications and their read and dismiss state", arguments: arguments) { context in
            let config = context.config
            try context.prepareKeys()
            HubCatalogFollower.start(context: context)
            let store: any UserNotificationStore = try context.stores.choose(
                schema: PostgresUserNotificationStore.schema, postgres: { try PostgresUserNotificationStore(url: $0) },
                sqlite: { SQLiteUserNotificationStore(database: try context.stores.open("sync.db", migrations: SQLiteUserNotificationStore.migrations)) })
            let events = try context.bus.bindEvents(config.sync.events ?? "tcp://127.0.0.1:7732", startingAfter: try store.streamSequence())
            var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
            let history = StoreHistoryWatch(store, logger: context.logger)
            let server = try context.bus.bindRequests(config.sync.requests, group: store.commitGroup, endpoints: { endpoints }) {
                ["notifications": ServiceRuntime.figure { try store.liveCount() }, "sequence": String(events.sequence)]
                    .merging(history.details) { $1 }
            }
            endpoints["requests"] = server.endpoint

            let log = ChangeLog(
                events, topic: "user", read: { try store.streamChanges(after: $0, limit: $1) }, sequence: \.streamSequence,
                body: { HubCodec.encode($0.message, id: String($0.streamSequence)) })
            /// Announced once the change is committed, so that a device that fetches at once finds it.
            func announce() throws {
                try store.afterCommit(log.publish)
            }
            SyncHandlers(context: context, store: store, announce: announce).install(on: server)

            // A store that failed over to a replica that was behind has lost the changes it had not passed
            // on. The stream goes on above them at once, so every user's devices are signalled; a device
            // whose cursor names a lost change is told so (history_rewound) and syncs in full.
            history.keep(
                log, counter: PostgresUserNotificationStore.counter, latest: store.streamSequence, loop: context.loop,
                lost: "user changes {} of the change stream, made before the failover and absent now",
                next: "devices whose cursors name lost changes sync in full")

            // Other sync processes sharing the store: PostgreSQL announces their changes (LISTEN/NOTIFY).
            if store is PostgresUserNotificationStore, let url = config.store {
                let channel = PostgresUserNotificationStore.notifyChannel
                let listener = try PostgresListener(url: url, channel: channel, report: context.logger.listening(on: channel))
                context.onShutdown { listener.close() }
                log.follow(notices: listener.poll, loop: context.loop, heartbeatMs: config.heartbeatMs)
            }

            context.loop.every(milliseconds: 1_000) {
                if try !store.expire(now: Date()).isEmpty { try announce() }
            }
            // A hub deleted takes its users and their notifications with it. (A hub made again under its
            // name is a new generation, whose keys never reach these, so one deleted while this
            // service was down leaves them unreachable; they go as they expire.)
            context.hubs.watchRemovals(loop: context.loop) { gone in
                let purged = try store.purgeHub(gone)
                context.logger.info("a deleted hub's users purged", ("hub", gone.qualifier), ("notifications", "\(purged)"))
            }
            // A reader further behind than this sees a gap, and signals every user's devices to fetch.
            context.loop.every(milliseconds: 60_000) { try store.pruneStream(keeping: 100_000) }
        }
    }
}
