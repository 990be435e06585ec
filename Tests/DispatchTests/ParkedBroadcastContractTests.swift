import DispatchCore
import Foundation
import HubProtocol
import Testing

@testable import NHDispatch

/// Broadcasts stored once, on every engine: what a broadcast parks counts once, an agent catches
/// up on what is after its position exactly once, and what never catches up expires with it.
@Suite("Parked broadcasts contract")
struct ParkedBroadcastContractTests {
    let now = Fixture.now

    static func owed(_ notification: AcceptedNotification, _ installation: String, expiresIn: TimeInterval = 3_600) -> OwedDelivery {
        OwedDelivery(
            sequence: notification.sequence, notificationId: notification.notificationId,
            plan: Fixture.plan(notification.notificationId, installation, payload: "for \(installation)", expiresIn: expiresIn))
    }

    @Test("a broadcast is stored once: its parked deliveries count once per shard however often it is recorded, and read back whole",
          arguments: StoreEngine.available)
    func storedOnce(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (a, b) = (Fixture.installation(inShard: 3), Fixture.installation(inShard: 9))
        let n1 = Fixture.notification("n1", sequence: 1)
        let parked = ParkedCounts(counts: [3: 400, 9: 600], registryAt: 17)
        try store.record(n1, plans: [], parked: parked, sent: [], shards: nil, now: now)
        try store.record(n1, plans: [], parked: parked, sent: [], shards: nil, now: now)
        try store.flush()
        let outcome = try #require(try store.outcome("n1"))
        #expect(outcome.targets == 1_000 && outcome.state == .completed)
        #expect(try Fixture.rows("deliveries", in: store) == 0, "no row per device")
        #expect(try Fixture.rows("broadcasts", in: store) == 1 && Fixture.rows("broadcast_shards", in: store) == 2)
        #expect(try store.parked(now: now, shards: nil) == [ParkedBroadcast(notification: n1, shards: [3: 17, 9: 17])])
        #expect(try store.parked(now: now, shards: [9]) == [ParkedBroadcast(notification: n1, shards: [9: 17])])
        #expect(try store.parked(now: now, shards: [4]).isEmpty)
        // Another dispatcher records its shards of it: they add.
        try store.record(n1, plans: [], parked: ParkedCounts(counts: [5: 10], registryAt: 18), sent: [], shards: [5], now: now)
        try store.flush()
        #expect(try store.outcome("n1")?.targets == 1_010)
        _ = (a, b)
    }

    @Test("an agent catches up on what is after its position, once, in order; marked here it is owed nothing; closed at the cursor after a stop",
          arguments: StoreEngine.available)
    func catchUp(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let a = Fixture.installation(inShard: 3)
        let shard = Shards.of(a)
        let (n1, n2, n3) = (Fixture.notification("n1", sequence: 1), Fixture.notification("n2", sequence: 2), Fixture.notification("n3", sequence: 3))
        for n in [n1, n2] { try store.record(n, plans: [], parked: ParkedCounts(counts: [shard: 1], registryAt: 1), sent: [], shards: nil, now: now) }
        // Away since notification 1: only n2 is owed, though the dispatcher asks for both.
        try store.setPositions([(a, .away(after: 1))])
        let made = try store.catchUp([Self.owed(n2, a), Self.owed(n1, a)], installationId: a, now: now)
        #expect(made.map(\.notificationId) == ["n2"] && made.map(\.payload) == ["for \(a)"])
        try store.flush()
        #expect(try store.pending(for: a, now: now).map(\.notificationId) == ["n2"])
        #expect(try store.pending(for: a, now: now).map(\.payload) == ["for \(a)"])
        // A second session while marked here is owed nothing more, even after acknowledging.
        try store.acknowledge([Self.owed(n2, a).plan.deliveryId], installationId: a, now: now)
        #expect(try store.catchUp([Self.owed(n1, a), Self.owed(n2, a)], installationId: a, now: now).isEmpty)
        try store.keepOwed([Self.owed(n2, a)], installationId: a, now: now)
        try store.flush()
        #expect(try store.pending(for: a, now: now).isEmpty)
        #expect(try store.outcome("n2")?.acknowledged == 1)
        // The dispatcher stops with it here; n3 is planned (parked for it) after the next start,
        // which closes its position at the cursor, 2: n3 alone is owed.
        try store.closePositions(shards: nil)
        try store.record(n3, plans: [], parked: ParkedCounts(counts: [shard: 1], registryAt: 1), sent: [], shards: nil, now: now)
        try store.catchUp([Self.owed(n1, a), Self.owed(n2, a), Self.owed(n3, a)], installationId: a, now: now)
        try store.flush()
        #expect(try store.pending(for: a, now: now).map(\.notificationId) == ["n3"])
        // The same catch-up again (a write retried) inserts nothing twice.
        try store.setPositions([(a, .away(after: 2))])
        try store.catchUp([Self.owed(n3, a)], installationId: a, now: now)
        try store.flush()
        #expect(try store.pending(for: a, now: now).count == 1)
    }

    @Test("a shard's positions close at that shard's cursor; others keep theirs", arguments: StoreEngine.available)
    func closedByShard(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (a, b) = (Fixture.installation(inShard: 3), Fixture.installation(inShard: 9))
        try store.record(Fixture.notification("n5", sequence: 5), plans: [], sent: [], shards: [3], now: now)
        try store.record(Fixture.notification("n7", sequence: 7), plans: [], sent: [], shards: [9], now: now)
        try store.setPositions([(a, .here), (b, .here)])
        try store.closePositions(shards: [3])
        let n6 = Fixture.notification("n6", sequence: 6)
        try store.keepOwed([Self.owed(n6, a)], installationId: a, now: now)
        try store.keepOwed([Self.owed(n6, b)], installationId: b, now: now)
        try store.flush()
        #expect(try store.pending(for: a, now: now).map(\.notificationId) == ["n6"], "away since 5")
        #expect(try store.pending(for: b, now: now).isEmpty, "still here")
    }

    @Test("what is parked and never caught up counts as expired when the broadcast expires; what caught up counts as its delivery does",
          arguments: StoreEngine.available)
    func expiry(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (a, b, c) = (Fixture.installation(inShard: 3), Fixture.installation(inShard: 3, "j"), Fixture.installation(inShard: 9))
        let n1 = Fixture.notification("n1", sequence: 1, expiresIn: 60)
        try store.record(n1, plans: [], parked: ParkedCounts(counts: [3: 2, 9: 1], registryAt: 1), sent: [], shards: nil, now: now)
        try store.catchUp([Self.owed(n1, a, expiresIn: 60)], installationId: a, now: now)
        try store.catchUp([Self.owed(n1, b, expiresIn: 60)], installationId: b, now: now)
        try store.markSent([Fixture.delivery(Self.owed(n1, a, expiresIn: 60).plan, of: "n1")], now: now)
        try store.acknowledge([Self.owed(n1, a).plan.deliveryId], installationId: a, now: now)
        try store.flush()
        // Before expiry nothing is counted as expired; c never comes back, b never acknowledges.
        #expect(try store.expire(now: now.addingTimeInterval(30)) == 0)
        #expect(try store.expire(now: now.addingTimeInterval(61)) == 2)
        try store.flush()
        let outcome = try #require(try store.outcome("n1"))
        #expect(outcome.targets == 3 && outcome.delivered == 1 && outcome.acknowledged == 1 && outcome.expired == 2)
        #expect(try store.parked(now: now, shards: nil).isEmpty)
        #expect(try Fixture.rows("broadcasts", in: store) == 0 && Fixture.rows("broadcast_shards", in: store) == 0)
        _ = c
    }
}
