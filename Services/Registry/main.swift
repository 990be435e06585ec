import Foundation
import HubProtocol
import ServiceKit

ServiceMain.run(name: "nh-registry", summary: "the registration service: installations, tags and templates") { context in
    let store = RegistryStore(database: try context.openStore("registry.db", migrations: RegistryStore.migrations))
    let config = context.config
    let events = try context.bindEvents(config.registry.events ?? "tcp://127.0.0.1:7702", startingAfter: try store.sequence())
    var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
    let server = try context.bindRequests(config.registry.requests) { endpoints }
    endpoints["requests"] = server.endpoint
    server.on(RegistrySnapshotRequest.self) { _ in try store.snapshot(now: Date()) }
}
