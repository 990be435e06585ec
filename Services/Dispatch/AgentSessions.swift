import Foundation

/// Which agent is connected on which route, and when it was last heard from.
struct AgentSessions {
    struct Session {
        var route: [Data]
        var lastSeen: Date
    }

    private(set) var byInstallation: [String: Session] = [:]

    /// Records a hello. Returns true when the agent is new or came back on another connection,
    /// which means everything pending must be sent again.
    mutating func hello(installationId: String, route: [Data], now: Date) -> Bool {
        let previous = byInstallation[installationId]
        byInstallation[installationId] = Session(route: route, lastSeen: now)
        return previous?.route != route
    }

    func route(of installationId: String) -> [Data]? { byInstallation[installationId]?.route }

    func installation(on route: [Data]) -> String? {
        byInstallation.first { $0.value.route == route }?.key
    }

    /// Forgets agents not heard from since `cutoff`; returns who was dropped.
    mutating func drop(silentSince cutoff: Date) -> [String] {
        let stale = byInstallation.filter { $0.value.lastSeen < cutoff }.map(\.key)
        for id in stale { byInstallation[id] = nil }
        return stale
    }

    var count: Int { byInstallation.count }
}
