import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit

/// How an nhctl command calls the hub: the credential it signs with, and the bus security made
/// from that credential (its CURVE client keys and the hub's public key), given to each client it
/// makes.
struct CtlCaller {
    let config: HubConfig
    let credential: ConnectionString
    let bus: BusSecurity
    /// The hub the commands act on: `--hub`, else the connection string's `EntityPath`, else the default hub.
    let scope: HubScope

    init(_ parsed: Arguments, config: HubConfig, environment: [String: String]) throws {
        self.config = config
        credential = try CtlSend.credential(parsed, config: config, environment: environment)
        bus = BusSecurity(
            serverKeys: nil, clientKeys: try BusSecurity.clientKeys(for: credential),
            serverPublicKey: try BusKeys.serverPublicKey(config: config, environment: environment), admitted: [])
        let hub = parsed[option: "hub"] ?? credential.entityPath
        if let hub { try HubName.check(hub) }
        scope = HubScope(hub: hub, defaultHub: config.hub)
    }

    /// The address a token for the hub is signed for.
    var hubResource: String { (config.namespace.hasSuffix("/") ? config.namespace : config.namespace + "/") + scope.name }

    /// A client of the service at `endpoint`, signing each request with the credential for the
    /// hub and naming it; with `namespace`, signing for the namespace itself (to manage hubs).
    func client(_ endpoint: String, namespace: Bool = false) throws -> HubClient {
        let resource = namespace ? config.namespace : hubResource
        let client = try HubClient(connect: endpoint, config: config, curve: bus.client, auth: { [credential] in credential.token(for: resource) })
        let hub = scope.envelopeHub
        client.hub = { hub }
        return client
    }

    /// The dispatchers outcomes are read from: `dispatch.requests`, then `dispatch.peers`; each
    /// client is closed by `close`.
    func outcomeReader() throws -> (reader: FirstAnswering, close: () -> Void) {
        let clients = try config.outcomeEndpoints.map { try client($0) }
        return (FirstAnswering(clients), { clients.forEach { $0.close() } })
    }
}
