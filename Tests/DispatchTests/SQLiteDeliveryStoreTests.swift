import DispatchCore
import Foundation
import HubProtocol
import Storage
import Testing

@testable import NHDispatch

/// What only the SQLite store does: it upgrades files written before shards, and holds deliveries
/// to agents in memory while a group of writes is open.
@Suite("Delivery store on SQLite")
struct SQLiteDeliveryStoreTests {
    @Test("deliveries stored before shards get theirs when the store opens, once")
    func upgrade() throws {
        let database = try StoreEngine.sqliteDatabase(SQLiteDeliveryStore.migrations.filter { $0.version <= 6 })
        let (a, b) = (Fixture.installation(inShard: 11), Fixture.installation(inShard: 12))
        for installation in [a, b] {
            try database.run(
                "INSERT INTO deliveries (delivery_id, notification_id, installation_id, payload, expires_at) VALUES (?, 'n', ?, 'old', ?)",
                ["n/\(installation)", installation, Fixture.now.addingTimeInterval(60).timeIntervalSince1970])
        }
        try database.migrate(SQLiteDeliveryStore.migrations)
        let store = try SQLiteDeliveryStore(database: database)
        #expect(try store.backlog(now: Fixture.now, shards: [11]) == [a])
        #expect(try store.backlog(now: Fixture.now, shards: [12, 13]) == [b])
        #expect(try store.pending(for: a, now: Fixture.now).map(\.payload) == ["old"])
        #expect(try database.queryOne("SELECT count(*) FROM sqlite_master WHERE name = 'deliveries_unsharded'")?[0].int == 0)
        _ = try SQLiteDeliveryStore(database: database)
        #expect(try database.queryOne("SELECT count(*) FROM deliveries WHERE shard IS NULL")?[0].int == 0)
    }

    // MARK: Deliveries held until the group commits

    private let now = Fixture.now

    private func written(_ store: SQLiteDeliveryStore) throws -> [String] {
        try store.database.query("SELECT delivery_id FROM deliveries ORDER BY rowid").map { $0[0].string ?? "" }
    }

    @Test("a last group that cannot be written at close says so, and is rolled back whole as a crash would lose it")
    func closeFails() throws {
        let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
        let plan = Fixture.plan("n1", "a")
        try store.writeTurn { try store.record(Fixture.notification("n1", sequence: 1), plans: [plan], sent: [], now: now) }
        #expect(store.held == 1)
        try store.database.execute("CREATE TRIGGER refuse BEFORE INSERT ON deliveries BEGIN SELECT RAISE(ABORT, 'the disk is full'); END")
        #expect(throws: StorageError.self) { try store.close() }
        #expect(try store.cursor() == 0, "the cursor's move went with the group")
        #expect(store.held == 0)
    }

    @Test("a delivery acknowledged before its group commits is never written; the rest are written at the commit, oldest first")
    func heldUntilCommit() throws {
        let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
        let plans = ["a", "b", "c"].map { Fixture.plan("n", $0) }
        try store.writeTurn {
            try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [plans[0].key], now: now)
        }
        try store.writeTurn {
            try store.markSent([Fixture.delivery(plans[1], of: "n")], now: now)
            #expect(try store.acknowledge([plans[0].deliveryId], installationId: "b", now: now) == 0)
            #expect(try store.acknowledge([plans[0].deliveryId], installationId: "a", now: now) == 1)
            return
        }
        #expect(try written(store).isEmpty)
        #expect(try store.totals()["pendingDeliveries"] == "2" && store.totals()["acknowledgedUnwrittenTotal"] == "1")
        try store.flush()
        #expect(try written(store) == [plans[1].deliveryId, plans[2].deliveryId])
        let outcome = try #require(try store.outcome("n"))
        #expect(outcome.targets == 3 && outcome.delivered == 2 && outcome.acknowledged == 1)
        // Written, it is acknowledged as any other: once.
        var fresh = 0
        try store.writeTurn { fresh = try store.acknowledge([plans[1].deliveryId, plans[0].deliveryId], installationId: "b", now: now) }
        #expect(fresh == 1)
        try store.flush()
        #expect(try written(store) == [plans[2].deliveryId])
        #expect(try store.outcome("n")?.acknowledged == 2)
        #expect(try store.unacknowledged(for: "c", now: now, limit: 10).sentBefore.isEmpty)
    }

    @Test("held deliveries are written many to a statement, in the order they were recorded")
    func manyHeld() throws {
        let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
        let plans = (0..<(2 * SQLiteDeliveryStore.rowsPerInsert + 3)).map { Fixture.plan("n", "i\($0)") }
        try store.writeTurn { try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [plans[5].key], now: now) }
        try store.flush()
        #expect(try written(store) == plans.map(\.deliveryId))
        #expect(try store.unacknowledged(for: "i5", now: now, limit: 10).sentBefore == [plans[5].deliveryId])
        #expect(try store.pending(for: "i130", now: now).map(\.payload) == ["hello"])
    }

    @Test("a read of deliveries while the group is open writes the held ones first, in the order they were recorded")
    func readsWriteHeld() throws {
        let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
        let first = Fixture.plan("n1", "a")
        let second = Fixture.plan("n2", "a")
        try store.writeTurn { try store.record(Fixture.notification("n1", sequence: 1), plans: [first], sent: [first.key], now: now) }
        try store.writeTurn { try store.record(Fixture.notification("n2", sequence: 2), plans: [second], sent: [], now: now) }
        let loaded = try store.unacknowledged(for: "a", now: now, limit: 10)
        #expect(loaded.deliveries.map(\.deliveryId) == [first.deliveryId, second.deliveryId] && loaded.sentBefore == [first.deliveryId])
        #expect(try written(store).count == 2)
        #expect(try store.backlog(now: now) == ["a"])
    }

    @Test("a notification at or before the cursor is checked against the rows written, and counts once")
    func recordedAgain() throws {
        let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
        let plans = [Fixture.plan("n", "a"), Fixture.plan("n", "b")]
        try store.writeTurn { try store.record(Fixture.notification("n", sequence: 3), plans: plans, sent: [], now: now) }
        try store.writeTurn { try store.record(Fixture.notification("n", sequence: 3), plans: plans, sent: [], now: now) }
        #expect(try written(store).count == 2)
        try store.flush()
        #expect(try store.outcome("n")?.targets == 2 && written(store).count == 2)
    }

    @Test("held deliveries past their expiry are counted expired from memory, and never written")
    func heldExpiry() throws {
        let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
        let plans = [Fixture.plan("n", "a", expiresIn: 10), Fixture.plan("n", "b")]
        try store.writeTurn { try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], now: now) }
        var expired = 0
        try store.writeTurn { expired = try store.expire(now: now.addingTimeInterval(60)) }
        #expect(try expired == 1 && written(store).isEmpty)
        try store.flush()
        #expect(try written(store) == [plans[1].deliveryId])
        #expect(try store.outcome("n")?.expired == 1)
    }

    @Test("an agent's delivery written at once, one with a topic, comes after the held ones recorded before it")
    func topicAfterHeld() throws {
        let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
        let first = Fixture.plan("n1", "a")
        var topical = Fixture.plan("n2", "a")
        topical.headers = [AppPushMessage.topicHeader: "weather"]
        try store.writeTurn { try store.record(Fixture.notification("n1", sequence: 1), plans: [first], sent: [], now: now) }
        try store.writeTurn { try store.record(Fixture.notification("n2", sequence: 2), plans: [topical], sent: [], now: now) }
        try store.flush()
        #expect(try store.pending(for: "a", now: now).map(\.deliveryId) == [first.deliveryId, topical.deliveryId])
    }

    @Test("a group whose commit fails is rolled back whole, as a crash would lose it: nothing stays held, and the cursor is read again")
    func failedFlush() throws {
        let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
        try store.writeTurn { try store.record(Fixture.notification("n0", sequence: 1), plans: [Fixture.plan("n0", "a")], sent: [], now: now) }
        try store.flush()
        try store.writeTurn { try store.record(Fixture.notification("n", sequence: 2), plans: [Fixture.plan("n", "a")], sent: [], now: now) }
        // The held delivery cannot be written: its table is gone, inside the group.
        try store.database.execute("DROP TABLE deliveries")
        #expect(throws: StorageError.self) { try store.flush() }
        #expect(store.held == 0 && !store.database.groupOpen)
        #expect(try store.cursor() == 1 && store.outcome("n") == nil)
        #expect(try store.pending(for: "a", now: now).map(\.notificationId) == ["n0"])
        // Planned again, it is held and written as the first time.
        try store.writeTurn { try store.record(Fixture.notification("n", sequence: 2), plans: [Fixture.plan("n", "a")], sent: [], now: now) }
        #expect(store.held == 1)
        try store.flush()
        #expect(try store.pending(for: "a", now: now).map(\.notificationId) == ["n0", "n"] && store.outcome("n")?.targets == 1)
    }

    @Test("a turn that fails takes back what it did to the held deliveries")
    func failedTurn() throws {
        let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
        let plans = [Fixture.plan("n", "a"), Fixture.plan("n", "b")]
        try store.writeTurn { try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], now: now) }
        struct Refused: Error {}
        #expect(throws: Refused.self) {
            try store.writeTurn {
                try store.markSent(plans.map { Fixture.delivery($0, of: "n") }, now: now)
                _ = try store.acknowledge([plans[0].deliveryId], installationId: "a", now: now)
                try store.record(Fixture.notification("m", sequence: 2), plans: [Fixture.plan("m", "a")], sent: [], now: now)
                throw Refused()
            }
        }
        #expect(try store.cursor() == 1)
        try store.flush()
        #expect(try written(store) == plans.map(\.deliveryId))
        #expect(try store.unacknowledged(for: "a", now: now, limit: 10).sentBefore.isEmpty)
        let outcome = try #require(try store.outcome("n"))
        #expect(outcome.delivered == 0 && outcome.acknowledged == 0 && outcome.targets == 2)
        #expect(try store.outcome("m") == nil)
    }

    @Test("a group lost to a crash loses its held deliveries and the cursor's move together: the notification is planned again")
    func lostGroup() throws {
        let database = try StoreEngine.sqliteDatabase()
        let store = try SQLiteDeliveryStore(database: database)
        try store.writeTurn { try store.record(Fixture.notification("n0", sequence: 1), plans: [Fixture.plan("n0", "a")], sent: [], now: now) }
        try store.flush()
        try store.writeTurn { try store.record(Fixture.notification("n", sequence: 2), plans: [Fixture.plan("n", "a")], sent: [], now: now) }
        database.close()
        let reopened = try SQLiteDeliveryStore(database: try SQLiteDatabase(path: database.path))
        #expect(try reopened.cursor() == 1 && reopened.outcome("n") == nil)
        #expect(try reopened.pending(for: "a", now: now).map(\.notificationId) == ["n0"])
    }
}

/// The held deliveries' own bookkeeping.
@Suite("Deliveries held until a group commits")
struct UnwrittenDeliveriesTests {
    func delivery(_ installation: String) -> UnwrittenDeliveries.Delivery {
        .init(notificationId: "n", installationId: installation, shard: 0, template: nil, payloadId: 1, expiresAt: Fixture.now, rich: nil, deliveredAt: nil)
    }

    @Test("held, sent once, let go only for its installation; taken oldest first")
    func basics() {
        var held = UnwrittenDeliveries()
        held.add("1", delivery("a"))
        held.add("2", delivery("b"))
        held.add("3", delivery("c"))
        #expect(held.markSent("2", at: Fixture.now) && !held.markSent("2", at: Fixture.now) && !held.markSent("9", at: Fixture.now))
        #expect(held.remove("1", installationId: "b") == nil && held.remove("1", installationId: "a") != nil)
        #expect(held.count == 2)
        let taken = held.takeAll()
        #expect(taken.map(\.0) == ["2", "3"] && taken[0].1.deliveredAt == Fixture.now && held.isEmpty)
    }

    @Test("reverting undoes changes newest first, and what was taken comes back in its order")
    func revert() {
        var held = UnwrittenDeliveries()
        held.add("1", delivery("a"))
        held.add("2", delivery("a"))
        held.settle()
        let mark = held.mark
        _ = held.remove("1", installationId: "a")
        _ = held.markSent("2", at: Fixture.now)
        held.add("3", delivery("a"))
        held.revert(to: mark)
        #expect(held.count == 2 && held["3"] == nil && held["2"]?.deliveredAt == nil && held["1"] != nil)
        let before = held.mark
        _ = held.takeAll()
        held.revert(to: before)
        held.add("4", delivery("a"))
        // A removal, then everything taken, in a write that fails: the order is the recorded one.
        held.settle()
        let again = held.mark
        _ = held.remove("2", installationId: "a")
        _ = held.takeAll()
        held.revert(to: again)
        #expect(held.takeAll().map(\.0) == ["1", "2", "4"])
    }
}
