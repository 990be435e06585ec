import Bus
import Foundation
import HubProtocol
import ServiceKit

/// The registry's change stream as the dispatcher reads it: a snapshot at start or after a gap,
/// then each installation changed, handed over in order by `pump`. It holds what the stream
/// brought until the dispatcher takes it, so it is made before the dispatcher and calls nothing of it.
final class RegistryFeed {
    enum Update {
        case snapshot(RegistrySnapshot)
        case changed(InstallationChanged)
    }

    /// What the replica's snapshots and changes brought, until `pump` hands it over.
    private final class Updates {
        var items: [Update] = []
    }

    let replica: CloneReplica
    private let updates: Updates

    init(registry: any ServiceCalling, connect endpoint: String, curve: (keys: CurveKeyPair, serverPublicKey: String)?) throws {
        let updates = Updates()
        replica = try CloneReplica(
            connect: endpoint, curve: curve,
            snapshot: {
                let snapshot = try registry.call(RegistrySnapshotRequest(), auth: nil)
                updates.items.append(.snapshot(snapshot))
                return snapshot.sequence
            },
            apply: { updates.items.append(.changed(try HubCodec.decode(InstallationChanged.self, from: $0.body).payload)) })
        self.updates = updates
    }

    var socket: ZMQSocket { replica.socket }
    /// The registry's sequence the index is at; nil before the first snapshot.
    var position: UInt64? { replica.tracker.position }
    /// Whether the stream is known to follow the snapshot (`CloneReplica.confirmed`).
    var confirmed: Bool { replica.confirmed }

    /// Reads what waits on the stream (a snapshot first, when one is due) and hands each update to
    /// `handle`, in order. What was read before a failure is handed over too.
    func pump(_ handle: (Update) -> Void) throws {
        defer {
            let items = updates.items
            updates.items = []
            for item in items { handle(item) }
        }
        try replica.pump()
    }

    func close() { replica.close() }
}
