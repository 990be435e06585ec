import DispatchCore
import Foundation
import ServiceKit

/// What a shared store keeps of the dispatchers that share the agents: who is alive, and who holds
/// each shard's lease until when.
protocol LeaseStore: AnyObject {
    func heartbeat(id: String, endpoint: String, now: Date) throws
    func liveDispatchers(now: Date, within: TimeInterval) throws -> Int
    /// Extends this owner's leases; returns the shards it still holds, each with its epoch.
    func renewLeases(owner: String, until: Date) throws -> [Int: UInt64]
    /// Takes up to `count` vacant or expired shards; two claimers never get the same one. Each
    /// claim moves the shard's epoch on (the fencing token its writes carry); returns them.
    func claimLeases(owner: String, endpoint: String, count: Int, now: Date, until: Date) throws -> [Int: UInt64]
    func releaseLeases(owner: String, shards: Set<Int>) throws
    /// The agent endpoint of each shard's live owner.
    func leaseOwners(now: Date) throws -> [Int: String]
    func shardCursors() throws -> [Int: UInt64]
}

/// A dispatcher's leases, kept at each heartbeat: renewed, claimed up to its fair share, given
/// back above it (`LeasePlan`). When the store cannot be reached, the shards are served only until
/// a margin before their leases run out, so that no two dispatchers ever serve one shard; and
/// every write the dispatcher makes is fenced by the epochs its leases were claimed at (`fence`),
/// so that one that has lost a shard without knowing it (paused, cut off) writes nothing for it.
final class ShardLeaseKeeper {
    let store: LeaseStore
    /// This dispatcher's name among the others: the endpoint agents reach it at.
    let id: String
    let period: TimeInterval
    let margin: TimeInterval
    /// The shards held, each with the epoch it was claimed at.
    private(set) var epochs: [Int: UInt64] = [:]
    private(set) var owners: [Int: String] = [:]
    private var renewedAt = Date.distantPast

    var owned: Set<Int> { Set(epochs.keys) }
    /// What this dispatcher's writes are fenced by.
    var fence: LeaseFence { LeaseFence(owner: id, epochs: epochs) }

    init(store: LeaseStore, id: String, period: TimeInterval) {
        self.store = store
        self.id = id
        self.period = period
        margin = period / 3
    }

    struct Change {
        var map: ShardMap
        /// Shards taken at this beat (or taken again at a new epoch): their pending deliveries are to be loaded.
        var gained: Set<Int>
    }

    /// Whether the leases may still be served at `now` without a beat first.
    func current(now: Date) -> Bool {
        LeasePlan.holds(renewedAt: renewedAt, now: now, period: period, margin: margin)
    }

    /// Forgets shards a fenced write found another dispatcher holds now.
    func lost(_ shards: Set<Int>) {
        for shard in shards { epochs[shard] = nil }
    }

    /// One heartbeat's work. Returns what this dispatcher serves when that changed, or always with `force`.
    func beat(now: Date, force: Bool = false) -> Change? {
        do {
            try store.heartbeat(id: id, endpoint: id, now: now)
            let live = try store.liveDispatchers(now: now, within: period)
            let until = now.addingTimeInterval(period)
            var held = try store.renewLeases(owner: id, until: until)
            renewedAt = now
            FaultPoint.reach(.renewal)
            let decision = LeasePlan.decide(owned: Set(held.keys), liveDispatchers: live)
            if !decision.release.isEmpty {
                try store.releaseLeases(owner: id, shards: decision.release)
                for shard in decision.release { held[shard] = nil }
            }
            if decision.claim > 0 {
                held.merge(try store.claimLeases(owner: id, endpoint: id, count: decision.claim, now: now, until: until)) { $1 }
            }
            let currentOwners = try store.leaseOwners(now: now)
            guard force || held != epochs || currentOwners != owners else { return nil }
            // A shard held at another epoch than before was lost and taken again meanwhile: its
            // state is the store's, as for a shard newly gained.
            let gained = Set(held.filter { epochs[$0.key] != $0.value }.keys)
            epochs = held
            owners = currentOwners
            let cursors = try store.shardCursors().filter { held[$0.key] != nil }
            return Change(map: ShardMap(owned: Set(held.keys), cursors: cursors, owners: currentOwners), gained: gained)
        } catch {
            // The store is out of reach: serve nothing once the leases may have run out.
            guard !epochs.isEmpty, !current(now: now) else { return nil }
            epochs = [:]
            return Change(map: ShardMap(owned: [], owners: owners), gained: [])
        }
    }
}
