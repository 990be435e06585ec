import Bus
import Foundation
import HubProtocol
import ServiceKit

ServiceMain.run(name: "nh-dispatch", summary: "the dispatcher: resolves targets and delivers to client agents") { context in
    let config = context.config
    _ = try context.openStore("dispatch.db", migrations: DispatchSchema.migrations)
    var index = InstallationIndex()
    let registry = try context.client(config.registry.requests, policy: RetryPolicy(timeout: 1_000, attempts: 1))
    let replica = try CloneReplica(
        connect: config.registry.events ?? "tcp://127.0.0.1:7702",
        snapshot: {
            let snapshot = try registry.call(RegistrySnapshotRequest())
            index.replace(with: snapshot)
            context.logger.info("registry snapshot", ("sequence", snapshot.sequence), ("installations", index.count))
            return snapshot.sequence
        },
        apply: { message in
            let change = try HubCodec.decode(InstallationChanged.self, from: message.body).payload
            index.apply(change)
        })
    context.onShutdown { replica.close() }
    context.loop.watch(replica.socket) { try replica.pump() }

    var endpoints: [String: String] = [:]
    let server = try context.bindRequests(config.dispatch.requests) { endpoints }
    let agents = try context.bindRequests(config.dispatch.agents ?? "tcp://127.0.0.1:7722", role: "agents") { endpoints }
    endpoints["requests"] = server.endpoint
    endpoints["agents"] = agents.endpoint
}
