import DispatchCore
import Foundation
import HubProtocol
import Postgres
import Testing

@testable import NHDispatch

/// What only a store that several dispatchers share must do: each serves its shards, and the
/// database keeps their claims apart and adds up their counts.
@Suite("Delivery store on PostgreSQL, shared by dispatchers", .enabled(if: StoreEngine.server != nil))
struct SharedDeliveryStoreTests {
    let now = Fixture.now

    /// Two stores on one fresh database, each to be used by one thread, as each dispatcher uses its own.
    private func twoStores() throws -> [PostgresDeliveryStore] {
        let url = try StoreEngine.postgresDatabase()
        return [try PostgresDeliveryStore(url: url), try PostgresDeliveryStore(url: url)]
    }

    /// Runs `body` for both stores at once, each on a thread of its own; returns what each returned.
    private func atOnce<T: Sendable>(_ stores: [PostgresDeliveryStore], _ body: @escaping (PostgresDeliveryStore, Int) throws -> T) -> [T?] {
        nonisolated(unsafe) let stores = stores
        nonisolated(unsafe) let body = body
        let lock = NSLock()
        nonisolated(unsafe) var results = [T?](repeating: nil, count: stores.count)
        DispatchQueue.concurrentPerform(iterations: stores.count) { index in
            let result = try? body(stores[index], index)
            lock.withLock { results[index] = result }
        }
        return results
    }

    @Test("two dispatchers claiming at once never both get a shard, and the database says who has each")
    func concurrentClaims() throws {
        let stores = try twoStores()
        for round in 0..<25 {
            let at = now.addingTimeInterval(Double(round) * 100)
            let claims = atOnce(stores) { store, index in
                Set(try store.claimLeases(owner: "d\(index)", endpoint: "tcp://d\(index)", count: 40, now: at, until: at.addingTimeInterval(10)).keys)
            }
            let (first, second) = (try #require(claims[0]), try #require(claims[1]))
            #expect(first.isDisjoint(with: second), "round \(round): both claimed \(first.intersection(second).sorted())")
            #expect(first.count + second.count == Shards.count)
            let owners = try stores[0].leaseOwners(now: at)
            #expect(Set(owners.filter { $0.value == "tcp://d0" }.keys) == first)
            #expect(Set(owners.filter { $0.value == "tcp://d1" }.keys) == second)
            // The next round starts with every lease expired.
        }
    }

    @Test("a lease another dispatcher let expire is claimed; a live one is not; a released one at once")
    func expiryAcrossDispatchers() throws {
        let stores = try twoStores()
        let all = Set(0..<Shards.count)
        func claim(_ index: Int, at seconds: TimeInterval) throws -> Set<Int> {
            let at = now.addingTimeInterval(seconds)
            return Set(try stores[index].claimLeases(owner: "d\(index)", endpoint: "tcp://d\(index)", count: 64, now: at, until: at.addingTimeInterval(5)).keys)
        }
        #expect(try claim(0, at: 0) == all)
        #expect(try claim(1, at: 4).isEmpty)
        try stores[0].releaseLeases(owner: "d0", shards: [7])
        #expect(try claim(1, at: 4) == [7])
        #expect(try claim(1, at: 5) == all.subtracting([7]))
        #expect(try stores[0].renewLeases(owner: "d0", until: now.addingTimeInterval(20)).isEmpty)
        #expect(Set(try stores[0].leaseOwners(now: now.addingTimeInterval(6)).values) == ["tcp://d1"])
    }

    @Test("outcomes written by two dispatchers for their shards of one notification add up")
    func outcomesAddUp() throws {
        let stores = try twoStores()
        let low = Set(0..<32), high = Set(32..<64)
        let (a, b) = (Fixture.installation(inShard: 3), Fixture.installation(inShard: 5))
        let (c, phone, windows) = (Fixture.installation(inShard: 40), Fixture.installation(inShard: 50, "p"), Fixture.installation(inShard: 60, "w"))
        let lowPlans = [Fixture.plan("n", a), Fixture.plan("n", b)]
        let highPlans = [
            Fixture.plan("n", c), Fixture.plan("n", phone, platform: .apns),
            Fixture.plan("n", windows, platform: .wns, unreachable: "PnsUnavailable"),
        ]
        let notification = Fixture.notification("n", sequence: 9)
        try stores[0].record(notification, plans: lowPlans, sent: [lowPlans[0].key], shards: low, now: now)
        try stores[1].record(notification, plans: highPlans, sent: [highPlans[0].key], shards: high, now: now.addingTimeInterval(1))
        // Another notification: one dispatcher finds targets, the other none.
        try stores[1].record(Fixture.notification("m", sequence: 10), plans: [], sent: [], shards: high, now: now)
        try stores[0].record(Fixture.notification("m", sequence: 10), plans: [Fixture.plan("m", a)], sent: [], shards: low, now: now)
        try stores[0].record(Fixture.notification("none", sequence: 11), plans: [], sent: [], shards: low, now: now)
        try stores[1].record(Fixture.notification("none", sequence: 11), plans: [], sent: [], shards: high, now: now)

        _ = try stores[0].acknowledge([lowPlans[0].deliveryId], installationId: a, now: now)
        _ = try stores[1].acknowledge([highPlans[0].deliveryId], installationId: c, now: now)
        try stores[1].pushed([(try #require(try stores[1].pendingPush(now: now, limit: 10, shards: high).first), .delivered)], now: now)

        for store in stores {
            let outcome = try #require(try store.outcome("n"))
            #expect(outcome.state == .completed && outcome.targets == 5)
            #expect(outcome.delivered == 3 && outcome.acknowledged == 3 && outcome.failed == 1)
            #expect(outcome.startedAt == now && outcome.endedAt == now.addingTimeInterval(1))
            #expect(outcome.platforms?["linux"]?["Targets"] == 3 && outcome.platforms?["linux"]?["Success"] == 2)
            #expect(outcome.platforms?["apns"] == ["Targets": 1, "Success": 1])
            #expect(outcome.platforms?["wns"] == ["Targets": 1, "PnsUnavailable": 1])
            #expect(try store.outcome("m")?.state == .completed && store.outcome("m")?.targets == 1)
            #expect(try store.outcome("none")?.state == .noTargetFound)
        }
        let cursors = try stores[0].shardCursors()
        #expect(low.allSatisfy { cursors[$0] == 11 } && high.allSatisfy { cursors[$0] == 11 })
        #expect(try stores[0].cursor() == 0)
    }

    @Test("two dispatchers writing turns for the same notifications at once: every count adds up, and neither waits on the other for ever")
    func concurrentTurns() throws {
        let stores = try twoStores()
        let shards = [Set(0..<32), Set(32..<64)]
        let installations = shards.map { owned in owned.sorted().prefix(8).map { Fixture.installation(inShard: $0) } }
        let count = 60
        let done = atOnce(stores) { store, index in
            for n in 0..<count {
                let id = "n\(n)"
                let plans = installations[index].map { Fixture.plan(id, $0, platform: n % 2 == 0 ? .linux : .apns) }
                try store.writeTurn {
                    try store.record(
                        Fixture.notification(id, sequence: UInt64(n + 1)), plans: plans, sent: Set(plans.map(\.key)), shards: shards[index],
                        now: now)
                    // Acknowledgements of an earlier notification in the same turn, in the other order.
                    if n >= 2 {
                        let earlier = "n\(n - 2)"
                        for installation in installations[index].reversed() {
                            _ = try store.acknowledge(["\(earlier)/\(installation)/native"], installationId: installation, now: now)
                        }
                    }
                }
            }
            return true
        }
        #expect(done == [true, true])
        for n in 0..<count {
            let outcome = try #require(try stores[0].outcome("n\(n)"))
            #expect(outcome.targets == 16 && outcome.delivered == 16)
            #expect(outcome.acknowledged == (n < count - 2 ? 16 : 0))
            #expect(outcome.platforms?[n % 2 == 0 ? "linux" : "apns"]?["Targets"] == 16)
        }
        #expect(Set(try stores[1].shardCursors().values) == [UInt64(count)])
    }

    @Test("a broken connection is opened again at the next call, with the session's settings; nothing is written in it until the new session is taken")
    func reconnect() throws {
        let url = try StoreEngine.postgresDatabase()
        let store = try PostgresDeliveryStore(url: url)
        #expect(try store.connection.queryOne("SHOW synchronous_commit")?[0].string == "off")
        let pid = try #require(try store.connection.queryOne("SELECT pg_backend_pid()")?[0].int)
        let admin = try PostgresConnection(url: url)
        defer { admin.close() }
        try admin.run("SELECT pg_terminate_backend($1)", [pid])
        for _ in 0..<100 where try admin.queryOne("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", [pid])?[0].int != 0 {
            Thread.sleep(forTimeInterval: 0.05)
        }
        // The first call finds the connection gone.
        _ = try? store.cursor()
        // What the dispatcher planned before the new session may be ahead of the store: the write is refused, whole.
        #expect(throws: StoreSessionChanged.self) {
            try store.writeTurn {
                try store.record(Fixture.notification("n", sequence: 3), plans: [Fixture.plan("n", "a")], sent: [], now: now)
            }
        }
        #expect(try store.cursor() == 0 && store.pending(for: "a", now: now).isEmpty)
        let history = try #require(store.storeHistory)
        #expect(store.takeSessionEvents() == [.renewed(history)])
        try store.writeTurn {
            try store.record(Fixture.notification("n", sequence: 3), plans: [Fixture.plan("n", "a")], sent: [], now: now)
        }
        #expect(try store.cursor() == 3)
        #expect(try store.connection.queryOne("SHOW synchronous_commit")?[0].string == "off")
        #expect(try store.connection.queryOne("SELECT pg_backend_pid()")?[0].int != pid)
    }

    @Test("a dispatcher's session waits for a lock, runs a statement and idles in a transaction only so long, and names its dispatcher")
    func sessionLimits() throws {
        let url = try StoreEngine.postgresDatabase()
        let store = try PostgresDeliveryStore(url: url, limits: .init(leasePeriod: 3, dispatcher: "tcp://10.0.0.1:7722"))
        func setting(_ name: String) throws -> String? { try store.connection.queryOne("SELECT current_setting($1)", [name])?[0].string }
        #expect(try setting("lock_timeout") == "500ms")
        #expect(try setting("idle_in_transaction_session_timeout") == "1s")
        #expect(try setting("statement_timeout") == "30s")
        #expect(try setting("synchronous_commit") == "off")
        #expect(try setting("nh.dispatcher") == "tcp://10.0.0.1:7722")
        #expect(try setting("application_name") == "nh-dispatch")
    }

    @Test("a dispatcher paused inside a write does not stall another: the server ends the paused one's transaction, and nothing of it stays")
    func pausedPeer() throws {
        let url = try StoreEngine.postgresDatabase()
        let limits = PostgresDeliveryStore.SessionLimits(leasePeriod: 3, dispatcher: nil)
        let (paused, survivor) = (try PostgresDeliveryStore(url: url, limits: limits), try PostgresDeliveryStore(url: url, limits: limits))
        let plans = [Fixture.plan("n", Fixture.installation(inShard: 4))]
        nonisolated(unsafe) let pausedStore = paused
        let pausedResult = NSLock()
        nonisolated(unsafe) var pausedError: Error?
        let started = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let now = self.now
        Thread.detachNewThread {
            do {
                try pausedStore.writeTurn {
                    try pausedStore.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], shards: [4], now: now)
                    started.signal()
                    // Paused with the delivery's row locked, longer than its idle limit.
                    Thread.sleep(forTimeInterval: 2.5)
                }
            } catch {
                pausedResult.withLock { pausedError = error }
            }
            done.signal()
        }
        started.wait()
        // The survivor writes the same delivery: its lock waits end at its limit, and once the
        // server has ended the paused session, the write goes through.
        var attempts = 0
        var written = false
        while !written && attempts < 100 {
            attempts += 1
            do {
                try survivor.writeTurn {
                    try survivor.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], shards: [4], now: now)
                }
                written = true
            } catch {
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
        #expect(written)
        done.wait()
        #expect(pausedResult.withLock { pausedError } != nil, "the paused write committed after its session was ended")
        #expect(try survivor.outcome("n")?.targets == 1)
        #expect(try survivor.pending(for: plans[0].installationId, now: now).count == 1)
    }

    @Test("settings join the options a URL already has")
    func settingsInURL() {
        #expect(PostgresDeliveryStore.withSettings("postgresql:///nh?host=/tmp/x&port=5&user=nh")
                == "postgresql:///nh?host=/tmp/x&port=5&user=nh&options=-c%20synchronous_commit%3Doff")
        #expect(PostgresDeliveryStore.withSettings("postgresql://nh@h:5432/nh?options=-c%20search_path%3Dx")
                == "postgresql://nh@h:5432/nh?options=-c%20search_path%3Dx%20-c%20synchronous_commit%3Doff")
        // A URL naming every host of a replicated store, which URLComponents cannot read, keeps its hosts and gets the settings.
        #expect(PostgresDeliveryStore.withSettings(
            "postgresql://nh@127.0.0.1:5001,127.0.0.1:5002/nh?target_session_attrs=read-write", applicationName: "nh-dispatch")
                == "postgresql://nh@127.0.0.1:5001,127.0.0.1:5002/nh?target_session_attrs=read-write&options=-c%20synchronous_commit%3Doff"
                + "&application_name=nh-dispatch")
        #expect(PostgresDeliveryStore.withSettings("postgresql://nh@h1,h2/nh")
                == "postgresql://nh@h1,h2/nh?options=-c%20synchronous_commit%3Doff")
    }
}
