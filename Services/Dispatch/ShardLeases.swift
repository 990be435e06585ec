import DispatchCore
import Foundation

/// What a shared store keeps of the dispatchers that share the agents: who is alive, and who holds
/// each shard's lease until when.
protocol LeaseStore: AnyObject {
    func heartbeat(id: String, endpoint: String, now: Date) throws
    func liveDispatchers(now: Date, within: TimeInterval) throws -> Int
    /// Extends this owner's leases; returns the shards it still holds.
    func renewLeases(owner: String, until: Date) throws -> Set<Int>
    /// Takes up to `count` vacant or expired shards; two claimers never get the same one.
    func claimLeases(owner: String, endpoint: String, count: Int, now: Date, until: Date) throws -> Set<Int>
    func releaseLeases(owner: String, shards: Set<Int>) throws
    /// The agent endpoint of each shard's live owner.
    func leaseOwners(now: Date) throws -> [Int: String]
    func shardCursors() throws -> [Int: UInt64]
}

/// A dispatcher's leases, kept at each heartbeat: renewed, claimed up to its fair share, given
/// back above it (`LeasePlan`). When the store cannot be reached, the shards are served only until
/// a margin before their leases run out, so that no two dispatchers ever serve one shard.
final class ShardLeaseKeeper {
    let store: LeaseStore
    /// This dispatcher's name among the others: the endpoint agents reach it at.
    let id: String
    let period: TimeInterval
    let margin: TimeInterval
    private(set) var owned: Set<Int> = []
    private(set) var owners: [Int: String] = [:]
    private var renewedAt = Date.distantPast

    init(store: LeaseStore, id: String, period: TimeInterval) {
        self.store = store
        self.id = id
        self.period = period
        margin = period / 3
    }

    struct Change {
        var map: ShardMap
        /// Shards taken at this beat: their pending deliveries are to be loaded.
        var gained: Set<Int>
    }

    /// One heartbeat's work. Returns what this dispatcher serves when that changed.
    func beat(now: Date) -> Change? {
        do {
            try store.heartbeat(id: id, endpoint: id, now: now)
            let live = try store.liveDispatchers(now: now, within: period)
            let until = now.addingTimeInterval(period)
            var held = try store.renewLeases(owner: id, until: until)
            renewedAt = now
            let decision = LeasePlan.decide(owned: held, liveDispatchers: live)
            if !decision.release.isEmpty {
                try store.releaseLeases(owner: id, shards: decision.release)
                held.subtract(decision.release)
            }
            if decision.claim > 0 {
                held.formUnion(try store.claimLeases(owner: id, endpoint: id, count: decision.claim, now: now, until: until))
            }
            let currentOwners = try store.leaseOwners(now: now)
            guard held != owned || currentOwners != owners else { return nil }
            let gained = held.subtracting(owned)
            owned = held
            owners = currentOwners
            let cursors = try store.shardCursors().filter { held.contains($0.key) }
            return Change(map: ShardMap(owned: held, cursors: cursors, owners: currentOwners), gained: gained)
        } catch {
            // The store is out of reach: serve nothing once the leases may have run out.
            guard !owned.isEmpty, !LeasePlan.holds(renewedAt: renewedAt, now: now, period: period, margin: margin) else { return nil }
            owned = []
            return Change(map: ShardMap(owned: [], owners: owners), gained: [])
        }
    }
}
