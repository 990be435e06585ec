import Auth
import Foundation
import HubProtocol
import ServiceKit

/// Where the agent keeps its files and which key it signs with.
final class AgentIdentity {
    let home: URL
    /// The hub the agent belongs to: its connection string's `EntityPath`, else the config's hub.
    let scope: HubScope
    let resource: String
    private let keyFile: URL
    private let namespace: String
    /// Nil until a key is found; on a host that runs the services too, the key file may appear
    /// only after the agent starts, so it is looked for again on each use.
    private(set) var credential: ConnectionString?
    /// Why `NH_AGENT_CONNECTION_STRING` is not used: it does not parse. Nil when it is absent or used.
    private(set) var connectionStringProblem: String?

    /// The home folder is `NH_AGENT_HOME`, or `agent/` in the data folder. The credential is the
    /// listen connection string in `NH_AGENT_CONNECTION_STRING`, or, on a host that runs the
    /// services too, the listen key from the hub's `keys.json`.
    init(config: HubConfig, environment: [String: String]) {
        home = environment["NH_AGENT_HOME"].map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? URL(fileURLWithPath: config.dataDir, isDirectory: true).appendingPathComponent("agent", isDirectory: true)
        namespace = config.namespace
        keyFile = URL(fileURLWithPath: config.dataDir).appendingPathComponent(KeyStore.fileName)
        if let text = environment["NH_AGENT_CONNECTION_STRING"] {
            do {
                credential = try ConnectionString(parsing: text)
            } catch {
                connectionStringProblem = "\(error)"
            }
        }
        scope = HubScope(hub: credential?.entityPath ?? config.hub, defaultHub: config.hub)
        resource = (config.namespace.hasSuffix("/") ? config.namespace : config.namespace + "/") + scope.name
        if credential == nil { credential = localListenKey() }
    }

    /// The hub to name in every request's envelope: nil for the default hub.
    var envelopeHub: String? { scope.envelopeHub }

    /// The listen key from the hub's key file on this host, if there is one. Only the listen key
    /// is taken: an agent may register and receive, never send.
    private func localListenKey() -> ConnectionString? {
        // Absent on a host without the services, or until they have written it; looked for again on each use.
        guard let keys = try? KeyStore.load(directory: keyFile.deletingLastPathComponent()),
            let listen = keys.key(named: AccessKey.defaultListenName)
        else { return nil }
        return ConnectionString(endpoint: namespace, keyName: listen.name, key: listen.key)
    }

    /// The credential, waited for up to `seconds`: on a host that runs the services too, the key
    /// file may appear only after the agent starts.
    func waitForCredential(seconds: TimeInterval) throws -> ConnectionString {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            if credential == nil { credential = localListenKey() }
            if let credential { return credential }
            guard Date() < deadline else {
                throw ConfigError(
                    "no listen key: set NH_AGENT_CONNECTION_STRING to the hub's listen connection string (nhctl keys prints it), or run on a host with the hub's data folder")
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
    }

    func token() -> String? {
        if credential == nil { credential = localListenKey() }
        return credential?.token(for: resource)
    }
}
