import Foundation
import HubProtocol

/// A change to the hub catalog (a hub made, a policy put, a key regenerated) reaches each service
/// when it next reads the catalog, within about a second (`HubCatalogFollower`). Whoever made the
/// change waits here until the services it names report that version or a later one in their
/// health (`hubCatalog`), so that a request made once the change is answered finds it everywhere.
public enum HubCatalogSettling {
    /// The catalog version a service reports; nil when it does not answer or reports none.
    public static func version(of service: any ServiceCalling) -> UInt64? {
        guard let health = try? service.call(HealthRequest(), auth: nil) else { return nil }
        return health.details?["hubCatalog"].flatMap { UInt64($0) }
    }

    /// Waits, polling every 50 ms, until every service reports `version` or later; returns the
    /// names of those that had not within `timeout` (a service down is among them).
    @discardableResult
    public static func wait(
        for version: UInt64, services: [(name: String, service: any ServiceCalling)], timeout: TimeInterval = 3
    ) -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        var waiting = services
        while true {
            waiting = waiting.filter { (Self.version(of: $0.service) ?? 0) < version }
            if waiting.isEmpty || Date() >= deadline { return waiting.map(\.name) }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }
}
