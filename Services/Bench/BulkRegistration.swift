import Bus
import Foundation
import HubProtocol
import ServiceKit

/// Registers installations through the registry with many requests in flight, as a fleet of real
/// devices would register: a window of upserts at a time on one forwarder, replies matched as they come.
enum BulkRegistration {
    /// `hub` names each installation's hub (by its index; nil: the default hub).
    static func upsert(_ installations: [Installation], registry: HubForwarder, window: Int = 256, hub: (Int) -> String? = { _ in nil }) throws {
        var waiting = 0
        var failures: [String] = []
        var next = 0
        while next < installations.count || waiting > 0 {
            while next < installations.count && waiting < window {
                waiting += 1
                registry.forward(InstallationUpsert(installation: installations[next]), hub: hub(next)) { result in
                    waiting -= 1
                    if case .failure(let error) = result { failures.append(error.description) }
                }
                next += 1
            }
            var poller = Poller()
            poller.add(registry.socket)
            _ = try poller.poll(timeout: 100)
            try registry.receive()
            registry.expire()
        }
        guard failures.isEmpty else { throw ConfigError("registration failed: \(failures.first ?? "") (\(failures.count) in all)") }
    }
}
