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

    init(_ parsed: Arguments, config: HubConfig, environment: [String: String]) throws {
        self.config = config
        credential = try CtlSend.credential(parsed, config: config, environment: environment)
        bus = BusSecurity(
            serverKeys: nil, clientKeys: try BusSecurity.clientKeys(for: credential),
            serverPublicKey: try BusKeys.serverPublicKey(config: config, environment: environment), admitted: [])
    }

    /// A client of the service at `endpoint`, signing each request with the credential.
    func client(_ endpoint: String) throws -> HubClient {
        try HubClient(connect: endpoint, config: config, curve: bus.client, auth: { [credential, config] in credential.token(for: config.hubResource) })
    }

    /// The dispatchers outcomes are read from: `dispatch.requests`, then `dispatch.peers`; each
    /// client is closed by `close`.
    func outcomeReader() throws -> (reader: FirstAnswering, close: () -> Void) {
        let clients = try config.outcomeEndpoints.map { try client($0) }
        return (FirstAnswering(clients), { clients.forEach { $0.close() } })
    }
}
