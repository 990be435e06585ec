import Foundation
import HubProtocol
import ServiceKit
import Storage

ServiceMain.run(name: "nh-sync", summary: "the sync store: per-user notifications and their read and dismiss state") { context in
    let database = try context.openStore("sync.db", migrations: SyncSchema.migrations)
    let config = context.config
    let sequence = UInt64(try database.queryOne("SELECT sequence FROM stream WHERE id = 1")?[0].int64 ?? 0)
    let events = try context.bindEvents(config.sync.events ?? "tcp://127.0.0.1:7732", startingAfter: sequence)
    var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
    let server = try context.bindRequests(config.sync.requests) { endpoints }
    endpoints["requests"] = server.endpoint
}
