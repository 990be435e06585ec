import DispatchCore
import Foundation
import Testing

@testable import NHDispatch

/// Leases as a shared store keeps them, in memory, for the keeper's decisions.
final class MemoryLeases: LeaseStore, @unchecked Sendable {
    struct Lease { var owner: String; var endpoint: String; var until: Date; var epoch: UInt64 = 1 }
    var leases: [Int: Lease] = [:]
    var seen: [String: Date] = [:]
    var cursors: [Int: UInt64] = [:]
    var reachable = true

    func check() throws { if !reachable { throw CocoaError(.fileReadUnknown) } }
    func heartbeat(id: String, endpoint: String, now: Date) throws {
        try check()
        seen[id] = now
    }
    func liveDispatchers(now: Date, within: TimeInterval) throws -> Int {
        try check()
        return seen.values.filter { now.timeIntervalSince($0) < within }.count
    }
    func renewLeases(owner: String, until: Date) throws -> [Int: UInt64] {
        try check()
        var held: [Int: UInt64] = [:]
        // An expired lease nobody has claimed is still this owner's to renew.
        for (shard, lease) in leases where lease.owner == owner {
            leases[shard]?.until = until
            held[shard] = lease.epoch
        }
        return held
    }
    var epochs: [Int: UInt64] = [:]
    func claimLeases(owner: String, endpoint: String, count: Int, now: Date, until: Date) throws -> [Int: UInt64] {
        try check()
        let vacant = (0..<Shards.count).filter { (leases[$0]?.until ?? .distantPast) <= now }.prefix(count)
        var claimed: [Int: UInt64] = [:]
        for shard in vacant {
            epochs[shard, default: 0] += 1
            leases[shard] = Lease(owner: owner, endpoint: endpoint, until: until, epoch: epochs[shard] ?? 1)
            claimed[shard] = epochs[shard]
        }
        return claimed
    }
    func releaseLeases(owner: String, shards: Set<Int>) throws {
        try check()
        for shard in shards where leases[shard]?.owner == owner { leases[shard] = nil }
    }
    func leaseOwners(now: Date) throws -> [Int: String] {
        try check()
        return leases.filter { $0.value.until > now }.mapValues(\.endpoint)
    }
    func shardCursors() throws -> [Int: UInt64] {
        try check()
        return cursors
    }
}

@Suite("Shard leases")
struct ShardLeaseKeeperTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("two dispatchers split the shards; when one stops, the other takes its shards once their leases run out")
    func splitAndTakeOver() throws {
        let store = MemoryLeases()
        store.cursors = [3: 17]
        let one = ShardLeaseKeeper(store: store, id: "tcp://a:7722", period: 6)
        let two = ShardLeaseKeeper(store: store, id: "tcp://b:7722", period: 6)
        let first = try #require(one.beat(now: Self.t0))
        #expect(first.map.owned.count == 64 && first.gained.count == 64 && first.map.cursors[3] == 17)
        // The second one joins: nothing vacant yet, but it learns who serves each shard; the first
        // gives back half at its next beat.
        let learned = try #require(two.beat(now: Self.t0.addingTimeInterval(1)))
        #expect(learned.map.owned.isEmpty && learned.map.owners.count == 64 && Set(learned.map.owners.values) == ["tcp://a:7722"])
        let halved = try #require(one.beat(now: Self.t0.addingTimeInterval(2)))
        #expect(halved.map.owned.count == 32 && halved.gained.isEmpty)
        let joined = try #require(two.beat(now: Self.t0.addingTimeInterval(3)))
        #expect(joined.map.owned.count == 32 && joined.map.owned.isDisjoint(with: one.owned))
        #expect(joined.map.owners.count == 64)
        // The first stops beating. Within its lease the second takes nothing; after it, everything.
        #expect(two.beat(now: Self.t0.addingTimeInterval(5))?.map.owned.count ?? 32 == 32)
        let takeover = try #require(two.beat(now: Self.t0.addingTimeInterval(9)))
        #expect(takeover.map.owned.count == 64 && takeover.gained == Set(0..<64).subtracting(joined.map.owned))
    }

    @Test("the fence carries each shard's epoch; a shard lost and claimed again is gained again, at a new epoch")
    func epochs() throws {
        let store = MemoryLeases()
        let one = ShardLeaseKeeper(store: store, id: "tcp://a:7722", period: 6)
        let two = ShardLeaseKeeper(store: store, id: "tcp://b:7722", period: 6)
        _ = one.beat(now: Self.t0)
        #expect(one.fence == LeaseFence(owner: "tcp://a:7722", epochs: Dictionary(uniqueKeysWithValues: (0..<64).map { ($0, UInt64(1)) })))
        // The first is paused past its lease; the second takes every shard at the next epoch.
        let taken = try #require(two.beat(now: Self.t0.addingTimeInterval(7)))
        #expect(taken.gained.count == 64 && Set(two.fence.epochs.values) == [2])
        // Back, the first finds it holds nothing, and its fence lists nothing.
        let back = try #require(one.beat(now: Self.t0.addingTimeInterval(8)))
        #expect(back.map.owned.isEmpty && one.fence.epochs.isEmpty)
        // A write's lost shards are forgotten at once, before the next beat.
        two.lost([3, 4])
        #expect(two.owned.count == 62 && two.fence.epochs[3] == nil)
        // The second stops; the first takes everything back, at a third epoch, as gained.
        let again = try #require(one.beat(now: Self.t0.addingTimeInterval(20)))
        #expect(again.gained.count == 64 && Set(one.fence.epochs.values) == [3])
        // Nothing changed: no change, unless forced.
        #expect(one.beat(now: Self.t0.addingTimeInterval(21)) == nil)
        let forced = try #require(one.beat(now: Self.t0.addingTimeInterval(22), force: true))
        #expect(forced.gained.isEmpty && forced.map.owned.count == 64)
    }

    @Test("a dispatcher that cannot reach the store stops serving before its leases could be taken")
    func unreachable() throws {
        let store = MemoryLeases()
        let keeper = ShardLeaseKeeper(store: store, id: "tcp://a:7722", period: 6)
        _ = keeper.beat(now: Self.t0)
        store.reachable = false
        #expect(keeper.beat(now: Self.t0.addingTimeInterval(3)) == nil, "still within the lease, less the margin")
        let stopped = try #require(keeper.beat(now: Self.t0.addingTimeInterval(4.5)))
        #expect(stopped.map.owned.isEmpty && keeper.owned.isEmpty)
        store.reachable = true
        let back = try #require(keeper.beat(now: Self.t0.addingTimeInterval(7)))
        #expect(back.map.owned.count == 64)
    }
}
