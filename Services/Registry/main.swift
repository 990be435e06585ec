import Auth
import Foundation
import HubProtocol
import Postgres
import ServiceKit

ServiceMain.run(name: "nh-registry", summary: "the registration service: installations, tags and templates") { context in
    let config = context.config
    let store: any InstallationStore = try context.chooseStore(
        schema: PostgresInstallationStore.schema, postgres: { try PostgresInstallationStore(url: $0) },
        sqlite: { SQLiteInstallationStore(database: try context.openStore("registry.db", migrations: SQLiteInstallationStore.migrations)) })
    context.prepareKeys()
    let events = try context.bindEvents(config.registry.events ?? "tcp://127.0.0.1:7702", startingAfter: try store.sequence())
    var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
    let server = try context.bindRequests(config.registry.requests, endpoints: { endpoints }) {
        ["installations": String((try? store.count(now: Date())) ?? 0), "sequence": String(events.sequence)]
    }
    endpoints["requests"] = server.endpoint

    /// Publishes what the log holds beyond what was published, in order: this process's changes
    /// and any other's that shares the store.
    func publishChanges() throws {
        while true {
            let changes = try store.changes(after: events.sequence, limit: 1_000)
            for change in changes {
                try events.publish(topic: "installation", sequence: change.sequence, body: HubCodec.encode(change.message, id: String(change.sequence)))
            }
            if changes.count < 1_000 { return }
        }
    }

    RegistryHandlers(context: context, store: store, publishChanges: publishChanges).install(on: server)

    // Other registry processes sharing the store: PostgreSQL announces their changes (LISTEN/
    // NOTIFY), read here without waiting every 50 ms, and they are published in order. Every
    // heartbeat publishes whatever the log holds beyond the stream, in case a notice was missed.
    if store is PostgresInstallationStore, let url = config.store {
        let listener = try PostgresListener(url: url, channel: PostgresInstallationStore.notifyChannel)
        context.onShutdown { listener.close() }
        context.loop.every(milliseconds: 50) { if listener.poll() { try publishChanges() } }
        context.loop.every(milliseconds: config.heartbeatMs) { try publishChanges() }
    }

    // Expired installations stop receiving at once (reads skip them) and are purged here.
    context.loop.every(milliseconds: 5_000) {
        for (id, _) in try store.purgeExpired(now: Date()) { context.logger.info("installation expired", ("id", id)) }
        try publishChanges()
        // A reader further behind than this takes a snapshot, as after any gap.
        try store.pruneChanges(keeping: 100_000)
    }
}
