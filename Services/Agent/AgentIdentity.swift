import Auth
import Foundation
import ServiceKit

/// Where the agent keeps its files and which key it signs with.
struct AgentIdentity {
    let home: URL
    let credential: ConnectionString?
    let resource: String

    /// The home folder is `NH_AGENT_HOME`, or `agent/` in the data folder. The credential is the
    /// listen connection string in `NH_AGENT_CONNECTION_STRING`, or, on a host that runs the
    /// services too, the listen key from the hub's `keys.json`.
    init(config: HubConfig, environment: [String: String]) {
        home = environment["NH_AGENT_HOME"].map { URL(fileURLWithPath: $0, isDirectory: true) }
            ?? URL(fileURLWithPath: config.dataDir, isDirectory: true).appendingPathComponent("agent", isDirectory: true)
        resource = config.hubResource
        if let text = environment["NH_AGENT_CONNECTION_STRING"], let parsed = try? ConnectionString(parsing: text) {
            credential = parsed
        } else if let data = FileManager.default.contents(
            atPath: URL(fileURLWithPath: config.dataDir).appendingPathComponent(KeyStore.fileName).path),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let keys = object["keys"] as? [[String: Any]],
            let listen = keys.first(where: { $0["name"] as? String == AccessKey.defaultListenName }),
            let key = listen["key"] as? String
        {
            credential = ConnectionString(endpoint: config.namespace, keyName: AccessKey.defaultListenName, key: key)
        } else {
            credential = nil
        }
    }

    func token() -> String? { credential?.token(for: resource) }
}
