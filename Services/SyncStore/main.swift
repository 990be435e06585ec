import Auth
import Foundation
import HubProtocol
import Postgres
import ServiceKit
import Storage

ServiceMain.run(name: "nh-sync", summary: "the sync store: per-user notifications and their read and dismiss state") { context in
    let config = context.config
    context.prepareKeys()
    _ = context.userTokens
    let store: any UserNotificationStore = try context.chooseStore(
        schema: PostgresUserNotificationStore.schema, postgres: { try PostgresUserNotificationStore(url: $0) },
        sqlite: { SQLiteUserNotificationStore(database: try context.openStore("sync.db", migrations: SQLiteUserNotificationStore.migrations)) })
    let events = try context.bindEvents(config.sync.events ?? "tcp://127.0.0.1:7732", startingAfter: try store.streamSequence())
    var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
    let server = try context.bindRequests(config.sync.requests, group: store.commitGroup, endpoints: { endpoints }) {
        ["notifications": String((try? store.liveCount()) ?? 0), "sequence": String(events.sequence)]
    }
    endpoints["requests"] = server.endpoint

    /// Publishes what the log holds beyond what was published, in order: this process's changes
    /// and those of any other that shares the store.
    func publishChanges() throws {
        while true {
            let changes = try store.streamChanges(after: events.sequence, limit: 1_000)
            for change in changes {
                try events.publish(
                    topic: "user", sequence: change.streamSequence,
                    body: HubCodec.encode(change.message, id: String(change.streamSequence)))
            }
            if changes.count < 1_000 { return }
        }
    }

    /// Announced once the change is committed, so that a device that fetches at once finds it.
    func announce() throws {
        try store.afterCommit(publishChanges)
    }
    SyncHandlers(context: context, store: store, announce: announce).install(on: server)

    // Other sync processes sharing the store: PostgreSQL announces their changes (LISTEN/NOTIFY),
    // read here without waiting every 50 ms, and they are published in order. Every heartbeat
    // publishes whatever the log holds beyond the stream, in case a notice was missed.
    if store is PostgresUserNotificationStore, let url = config.store {
        let listener = try PostgresListener(url: url, channel: PostgresUserNotificationStore.notifyChannel)
        context.onShutdown { listener.close() }
        context.loop.every(milliseconds: 50) { if listener.poll() { try publishChanges() } }
        context.loop.every(milliseconds: config.heartbeatMs) { try publishChanges() }
    }

    context.loop.every(milliseconds: 1_000) {
        if try !store.expire(now: Date()).isEmpty { try announce() }
    }
    // A reader further behind than this sees a gap, and signals every user's devices to fetch.
    context.loop.every(milliseconds: 60_000) { try store.pruneStream(keeping: 100_000) }
}
