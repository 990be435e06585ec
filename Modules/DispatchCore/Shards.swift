import Foundation

/// Installations fall into a fixed number of shards by a hash of their id. Where several
/// dispatchers share the agents, each holds leases on some shards and serves only their
/// installations. The count never changes: it would move installations between shards.
public enum Shards {
    public static let count = 64

    /// The shard of an installation: FNV-1a (64-bit) of its id's UTF-8 bytes, modulo `count`.
    public static func of(_ installationId: String) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in installationId.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return Int(hash % UInt64(count))
    }

    /// How many shards each of `dispatchers` live dispatchers should hold: the fair share, rounded up.
    public static func fairShare(dispatchers: Int) -> Int {
        (count + max(1, dispatchers) - 1) / max(1, dispatchers)
    }
}

/// What this dispatcher serves: the shards it holds leases on, how far each has been planned, and
/// who serves the others (for redirects).
public struct ShardMap: Equatable, Sendable {
    public var owned: Set<Int>
    /// For each owned shard, the sequence of the last notification planned for it.
    public var cursors: [Int: UInt64]
    /// The agent endpoint of each shard's current owner, where known.
    public var owners: [Int: String]

    public init(owned: Set<Int>, cursors: [Int: UInt64] = [:], owners: [Int: String] = [:]) {
        self.owned = owned
        self.cursors = cursors
        self.owners = owners
    }

    /// Cursors read from the store, with each shard's `planned` cursor kept where it is ahead,
    /// except for shards in `gained` (taken at this beat, or again at a new epoch), which start
    /// from the store's. A shard held on at one epoch is planned by this dispatcher alone, so what
    /// it planned and has not written yet is past the store's cursor, never behind it.
    public static func keeping(_ planned: [Int: UInt64], over stored: [Int: UInt64], except gained: Set<Int>) -> [Int: UInt64] {
        var cursors = stored
        for (shard, cursor) in stored where !gained.contains(shard) {
            if let mine = planned[shard], mine > cursor { cursors[shard] = mine }
        }
        return cursors
    }
}

/// What a dispatcher does with its leases at each heartbeat: keep its fair share of the shards
/// among the live dispatchers, claiming vacant ones when it has fewer and giving back its highest
/// when it has more (as when another dispatcher joins), so that the shards end up spread evenly.
public enum LeasePlan {
    public struct Decision: Equatable, Sendable {
        /// How many vacant shards to claim.
        public var claim: Int
        /// Shards to give back.
        public var release: Set<Int>

        public init(claim: Int, release: Set<Int>) {
            self.claim = claim
            self.release = release
        }
    }

    public static func decide(owned: Set<Int>, liveDispatchers: Int) -> Decision {
        let target = Shards.fairShare(dispatchers: liveDispatchers)
        if owned.count > target {
            return Decision(claim: 0, release: Set(owned.sorted().suffix(owned.count - target)))
        }
        return Decision(claim: target - owned.count, release: [])
    }

    /// Whether leases renewed at `renewedAt` may still be served at `now`: a lease lasts `period`,
    /// and a dispatcher stops serving `margin` before it runs out, so that it has stopped before
    /// another can claim the shard.
    public static func holds(renewedAt: Date, now: Date, period: TimeInterval, margin: TimeInterval) -> Bool {
        now.timeIntervalSince(renewedAt) < period - margin
    }
}
