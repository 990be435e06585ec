import Foundation
import HubProtocol

/// The dispatcher's copy of the registry, kept current from its change stream.
struct InstallationIndex {
    private(set) var installations: [String: Installation] = [:]

    mutating func replace(with snapshot: RegistrySnapshot) {
        installations = Dictionary(snapshot.installations.map { ($0.installationId, $0) }, uniquingKeysWith: { $1 })
    }

    mutating func apply(_ change: InstallationChanged) {
        switch change.change {
        case .upserted: installations[change.installationId] = change.installation
        case .deleted: installations[change.installationId] = nil
        }
    }

    var count: Int { installations.count }
}
