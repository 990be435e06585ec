import DispatchCore
import Foundation
import HubProtocol
import Postgres
import Push
import Storage
import StoreEngines
import Synchronization
import Testing

@testable import NHDispatch

/// What every engine of the dispatcher's store must do alike.
@Suite("Delivery store contract")
struct DeliveryStoreContractTests {
    let now = Fixture.now

    @Test("a record stores its deliveries, each payload once, opens the outcome and moves the cursor; recorded again it counts nothing twice",
          arguments: StoreEngine.available)
    func record(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let plans = [
            Fixture.plan("n1", "a", payload: "A"), Fixture.plan("n1", "b", payload: "A"), Fixture.plan("n1", "c", payload: "A"),
            Fixture.plan("n1", "d", payload: "B"),
        ]
        try store.record(Fixture.notification("n1", sequence: 7), plans: plans, sent: [plans[0].key], now: now)
        #expect(try store.cursor() == 7)
        #expect(try Fixture.rows("payloads", in: store) == 2)
        #expect(try store.pending(for: "c", now: now).map(\.payload) == ["A"])
        #expect(try store.pending(for: "d", now: now).map(\.payload) == ["B"])
        var outcome = try #require(try store.outcome("n1"))
        #expect(outcome.state == .completed && outcome.targets == 4 && outcome.delivered == 1)
        #expect(outcome.startedAt == now && outcome.endedAt == now && outcome.enqueuedAt == now.addingTimeInterval(-1))

        // A pull repeated after a restart: nothing counts again, and the cursor never goes back.
        try store.record(Fixture.notification("n1", sequence: 7), plans: plans, sent: [plans[0].key], now: now)
        try store.record(Fixture.notification("n0", sequence: 5), plans: [], sent: [], now: now)
        outcome = try #require(try store.outcome("n1"))
        #expect(outcome.targets == 4 && outcome.delivered == 1)
        #expect(try store.cursor() == 7)
        #expect(try store.outcome("n0")?.state == .noTargetFound)
        #expect(try store.outcome("missing") == nil)
    }

    @Test("the statement that writes many agents' deliveries writes each once, readable as any other", arguments: StoreEngine.available)
    func manyRows(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        func write<E: DeliveryEngine>(_ engine: E) throws {
            let values: [(any StoreValue)?] = ["d1", "n", "a", Shards.of("a"), nil, nil, now.addingTimeInterval(60).timeIntervalSince1970, nil, nil]
                + ["d2", "n", "a", Shards.of("a"), "t", nil, now.addingTimeInterval(60).timeIntervalSince1970, nil, now.timeIntervalSince1970]
            #expect(try engine.run(E.sql.insertAgentDeliveries(2), values) == 2)
            #expect(try engine.run(E.sql.insertAgentDeliveries(1), Array(values.prefix(9))) == 0, "unless there")
        }
        switch store {
        case let sqlite as SQLiteDeliveryStore: try write(sqlite)
        case let grouped as GroupedStore: try write(grouped.inner)
        case let postgres as PostgresDeliveryStore: try write(postgres)
        default: Issue.record("an engine this test does not know")
        }
        let loaded = try store.unacknowledged(for: "a", now: now, limit: 10)
        #expect(loaded.deliveries.map(\.deliveryId) == ["d1", "d2"] && loaded.deliveries.map(\.template) == [nil, "t"])
        #expect(loaded.sentBefore == ["d2"])
    }

    @Test("where a statement takes many rows, a broadcast's deliveries go in together: NULLs kept, each once, only new ones counted",
          arguments: StoreEngine.available)
    func batchedRecord(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let rich = RichReference(richId: "r1", richType: "text/plain", message: "m", contentType: "text/plain", size: 3)
        var plans = (0..<2_500).map { Fixture.plan("n", "i\($0)") }
        plans[1].template = "t\"quoted\",{x}"
        plans[2].rich = rich
        let sent = Set(plans.prefix(1_000).map(\.key))
        let all = Set(0..<Shards.count)
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: sent, shards: all, now: now)
        var outcome = try #require(try store.outcome("n"))
        #expect(outcome.targets == 2_500 && outcome.delivered == 1_000)
        let second = try store.unacknowledged(for: "i1", now: now, limit: 10)
        #expect(second.deliveries.map(\.template) == ["t\"quoted\",{x}"] && second.sentBefore == [plans[1].deliveryId])
        #expect(try store.pending(for: "i2", now: now).map(\.rich) == [rich])
        #expect(try store.unacknowledged(for: "i2000", now: now, limit: 10).sentBefore.isEmpty)
        // Recorded again with more installations, as a second dispatcher would: only the new ones count.
        plans.append(Fixture.plan("n", "late"))
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], shards: all, now: now)
        outcome = try #require(try store.outcome("n"))
        #expect(outcome.targets == 2_501 && outcome.delivered == 1_000)
        if let postgres = store as? PostgresDeliveryStore { #expect(postgres.commits.batchesRows) }
    }

    @Test("a notification past its expiry is abandoned: counted expired once, with no deliveries", arguments: StoreEngine.available)
    func abandoned(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        try store.record(Fixture.notification("old", sequence: 1, expiresIn: -1), plans: [Fixture.plan("old", "a")], sent: [], now: now)
        let outcome = try #require(try store.outcome("old"))
        #expect(outcome.state == .abandoned && outcome.expired == 1 && outcome.targets == 0)
        #expect(try store.pending(for: "a", now: now).isEmpty)
        #expect(try store.cursor() == 1)
    }

    @Test("a delivery counts as delivered at its first send only", arguments: StoreEngine.available)
    func sentOnce(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let plans = [Fixture.plan("n", "a"), Fixture.plan("n", "b")]
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], now: now)
        #expect(try store.outcome("n")?.delivered == 0)
        let deliveries = plans.map { Fixture.delivery($0, of: "n") }
        #expect(try store.unacknowledged(for: "a", now: now, limit: 10).sentBefore.isEmpty)
        try store.markSent([deliveries[0], deliveries[0], deliveries[1]], now: now)
        try store.markSent(deliveries, now: now)
        #expect(try store.outcome("n")?.delivered == 2)
        // Loaded again for a new session, each says it was sent before: sending it then is a resend.
        let loaded = try store.unacknowledged(for: "a", now: now, limit: 10)
        #expect(loaded.deliveries.map(\.deliveryId) == [plans[0].deliveryId] && loaded.sentBefore == [plans[0].deliveryId])
    }

    @Test("acknowledgements count once, only from the installation a delivery was meant for", arguments: StoreEngine.available)
    func acknowledgements(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let plans = [Fixture.plan("n", "a"), Fixture.plan("n", "b")]
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: Set(plans.map(\.key)), now: now)
        #expect(try store.acknowledge([plans[0].deliveryId], installationId: "b", now: now) == 0)
        #expect(try store.acknowledge([plans[0].deliveryId, "unknown"], installationId: "a", now: now) == 1)
        #expect(try store.acknowledge([plans[0].deliveryId], installationId: "a", now: now) == 0)
        #expect(try store.pending(for: "a", now: now).isEmpty)
        #expect(try store.pending(for: "b", now: now).map(\.deliveryId) == [plans[1].deliveryId])
        let outcome = try #require(try store.outcome("n"))
        #expect(outcome.acknowledged == 1 && outcome.delivered == 2)
    }

    @Test("a turn's acknowledgements from many installations, in one call: each delivery once, only from its own installation, per notification",
          arguments: StoreEngine.available)
    func manyAcknowledgements(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let installations = (0..<40).map { "i\($0)" }
        var plans: [String: [PlannedDelivery]] = [:]
        for (index, notification) in ["n1", "n2"].enumerated() {
            plans[notification] = installations.map { Fixture.plan(notification, $0) }
            try store.record(
                Fixture.notification(notification, sequence: UInt64(index + 1)), plans: plans[notification]!,
                sent: Set(plans[notification]!.map(\.key)), now: now)
        }
        // Every installation acknowledges n1's delivery (one of them twice), the first ten n2's too;
        // i0 also names i1's delivery, which is not its own, and one nobody has.
        var acks: [(String, [DeliveryKey])] = installations.map { ($0, [Fixture.plan("n1", $0).key]) }
        acks[3].1.append(acks[3].1[0])
        for index in 0..<10 { acks[index].1.append(Fixture.plan("n2", installations[index]).key) }
        acks[0].1 += [Fixture.plan("n2", "i1").key, "unknown"]
        #expect(try store.acknowledge(acks, now: now) == 50)
        #expect(try store.acknowledge(acks, now: now) == 0, "counted once")
        #expect(try store.outcome("n1")?.acknowledged == 40)
        #expect(try store.outcome("n2")?.acknowledged == 10)
        #expect(try store.pending(for: "i1", now: now).isEmpty)
        #expect(try store.pending(for: "i10", now: now).map(\.deliveryId) == [Fixture.plan("n2", "i10").deliveryId])
        #expect(try store.acknowledge([], now: now) == 0)
    }

    @Test("a write that records a broadcast and takes its acknowledgements (a group of turns) counts each once, and the acknowledged are never written",
          arguments: StoreEngine.available)
    func groupOfTurns(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let all = Set(0..<Shards.count)
        let installations = (0..<50).map { "g\($0)" }
        let first = installations.map { Fixture.plan("n1", $0) }
        let second = installations.map { Fixture.plan("n2", $0) }
        try store.writeTurn {
            try store.record(Fixture.notification("n1", sequence: 1), plans: first, sent: Set(first.map(\.key)), shards: all, now: now)
            try store.record(Fixture.notification("n2", sequence: 2), plans: second, sent: [], shards: all, now: now)
            try store.markSent(second.prefix(10).map { Fixture.delivery($0, of: "n2") }, now: now)
            // Every n1 delivery but the last five is acknowledged, and n2's first.
            let acks = first.dropLast(5).map { ($0.installationId, [$0.key]) } + [(second[0].installationId, [second[0].key])]
            #expect(try store.acknowledge(acks, now: now) == 46)
        }
        try store.flush()
        let n1 = try #require(try store.outcome("n1"))
        let n2 = try #require(try store.outcome("n2"))
        #expect(n1.targets == 50 && n1.delivered == 50 && n1.acknowledged == 45)
        #expect(n2.targets == 50 && n2.delivered == 10 && n2.acknowledged == 1)
        #expect(try Fixture.rows("deliveries", in: store) == 5 + 49)
        let unwritten = Int(try store.totals()["acknowledgedUnwrittenTotal"] ?? "") ?? -1
        #expect(unwritten == 46, "held, then acknowledged in the same group")
        // The rows left are loaded in the order their notifications came, each sent or not as it was.
        let last = try store.unacknowledged(for: installations[49], now: now, limit: 10)
        #expect(last.deliveries.map(\.deliveryId) == [first[49].deliveryId, second[49].deliveryId] && last.sentBefore == [first[49].deliveryId])
        #expect(try store.unacknowledged(for: installations[5], now: now, limit: 10).sentBefore == [second[5].deliveryId])
        // Recorded again with one more installation, as a second dispatcher would: behind the
        // shards' cursors, so checked against the rows, and only the new one counts.
        try store.writeTurn {
            try store.record(
                Fixture.notification("n2", sequence: 2), plans: Array(second.dropFirst()) + [Fixture.plan("n2", "late")], sent: [], shards: all,
                now: now)
        }
        try store.flush()
        #expect(try store.outcome("n2")?.targets == 51)
        #expect(try Fixture.rows("deliveries", in: store) == 5 + 49 + 1)
    }

    @Test("a failure counts once, never as acknowledged, and only from its installation", arguments: StoreEngine.available)
    func failures(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let plan = Fixture.plan("n", "a")
        try store.record(Fixture.notification("n", sequence: 1), plans: [plan], sent: [], now: now)
        let failure = DeliveryFailure(deliveryId: plan.deliveryId, reason: "rich payload unavailable")
        try store.fail([failure], installationId: "b", now: now)
        #expect(try store.outcome("n")?.failed == 0)
        try store.fail([failure, failure], installationId: "a", now: now)
        try store.fail([failure], installationId: "a", now: now)
        #expect(try store.acknowledge([plan.deliveryId], installationId: "a", now: now) == 0)
        let outcome = try #require(try store.outcome("n"))
        #expect(outcome.failed == 1 && outcome.acknowledged == 0)
        #expect(try store.pending(for: "a", now: now).isEmpty)
        #expect(try store.backlog(now: now).isEmpty)
    }

    @Test("a delivery the hub has no path for fails at once, under its outcome name", arguments: StoreEngine.available)
    func unreachable(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let plans = [Fixture.plan("n", "a", platform: .wns, unreachable: "PnsUnavailable"), Fixture.plan("n", "b")]
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], now: now)
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], now: now)
        let outcome = try #require(try store.outcome("n"))
        #expect(outcome.targets == 2 && outcome.failed == 1)
        #expect(outcome.platforms?["wns"] == ["Targets": 1, "PnsUnavailable": 1])
        #expect(try store.pending(for: "a", now: now).isEmpty)
        #expect(try store.pendingPush(now: now).isEmpty)
    }

    @Test("expiry removes open deliveries, counting each once, per platform too", arguments: StoreEngine.available)
    func expiry(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let plans = [
            Fixture.plan("n", "a", expiresIn: 10), Fixture.plan("n", "b", expiresIn: 10), Fixture.plan("n", "p", platform: .apns, expiresIn: 10),
            Fixture.plan("n", "late", expiresIn: 100),
        ]
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [plans[0].key], now: now)
        #expect(try store.acknowledge([plans[1].deliveryId], installationId: "b", now: now) == 1)
        #expect(try store.expire(now: now.addingTimeInterval(9)) == 0)
        #expect(try store.expire(now: now.addingTimeInterval(10)) == 2)
        #expect(try store.expire(now: now.addingTimeInterval(11)) == 0)
        let outcome = try #require(try store.outcome("n"))
        #expect(outcome.expired == 2 && outcome.acknowledged == 1)
        #expect(outcome.platforms?["apns"]?["Expired"] == 1)
        #expect(outcome.platforms?["linux"]?["Expired"] == 1)
        #expect(try store.pending(for: "late", now: now.addingTimeInterval(11)).count == 1)
    }

    @Test("a newer delivery with a topic replaces the installation's open ones with that topic not yet sent; they count expired",
          arguments: StoreEngine.available)
    func topics(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        func plan(_ notification: String, _ installation: String, topic: String?) -> PlannedDelivery {
            var plan = Fixture.plan(notification, installation, payload: notification)
            plan.headers = topic.map { [AppPushMessage.topicHeader: $0] }
            return plan
        }
        let first = plan("n1", "a", topic: "e1:score"), sentOne = plan("n2", "a", topic: "e1:score")
        try store.record(Fixture.notification("n1", sequence: 1), plans: [first], sent: [], now: now)
        try store.record(Fixture.notification("n2", sequence: 2), plans: [sentOne], sent: [sentOne.key], now: now)
        // Other topics, another installation and a delivery without a topic stay.
        try store.record(Fixture.notification("n3", sequence: 3), plans: [
            plan("n3", "a", topic: "e1:weather"), plan("n3", "a2", topic: "e1:score"), plan("n3", "b", topic: nil),
        ], sent: [], now: now)
        let newer = plan("n4", "a", topic: "e1:score")
        try store.record(Fixture.notification("n4", sequence: 4), plans: [newer], sent: [], now: now)
        // n1 was replaced; n2 was sent already, so it is the agent's and stays open.
        #expect(try store.pending(for: "a", now: now).map(\.notificationId) == ["n2", "n3", "n4"])
        #expect(try store.pending(for: "a2", now: now).count == 1)
        #expect(try store.expire(now: now) == 1)
        #expect(try store.outcome("n1")?.expired == 1)
        #expect(try store.outcome("n4")?.expired == 0)
    }

    @Test("pending deliveries come oldest first, up to a limit; the backlog names agents with open deliveries",
          arguments: StoreEngine.available)
    func pendingAndBacklog(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        for (index, id) in ["n3", "n1", "n2"].enumerated() {
            try store.record(
                Fixture.notification(id, sequence: UInt64(index + 1)),
                plans: [Fixture.plan(id, "a", payload: id), Fixture.plan(id, "b", expiresIn: 5), Fixture.plan(id, "p", platform: .fcmv1)],
                sent: [], now: now)
        }
        #expect(try store.pending(for: "a", now: now).map(\.notificationId) == ["n3", "n1", "n2"])
        #expect(try store.pending(for: "a", now: now, limit: 2).map(\.payload) == ["n3", "n1"])
        let first = try #require(try store.pending(for: "a", now: now).first)
        #expect(first.installationId == "a" && first.expiresAt == now.addingTimeInterval(3_600) && first.template == nil)
        #expect(try store.backlog(now: now) == ["a", "b"])
        #expect(try store.backlog(now: now.addingTimeInterval(6)) == ["a"])
        _ = try store.acknowledge(["n3/a/native", "n1/a/native", "n2/a/native"], installationId: "a", now: now)
        #expect(try store.backlog(now: now.addingTimeInterval(6)).isEmpty)
    }

    @Test("a rich delivery keeps its reference", arguments: StoreEngine.available)
    func rich(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        var plan = Fixture.plan("n", "a")
        plan.rich = RichReference(richId: "abc", richType: "image", message: "look", contentType: "image/png", size: 3)
        plan.template = "t"
        try store.record(Fixture.notification("n", sequence: 1), plans: [plan], sent: [], now: now)
        let delivery = try #require(try store.pending(for: "a", now: now).first)
        #expect(delivery.rich == plan.rich && delivery.template == "t")
    }

    @Test("push deliveries wait until a push service answers; each answer counts under its outcome", arguments: StoreEngine.available)
    func push(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let platforms: [Platform] = [.apns, .fcmv1, .browser, .apns]
        let plans = platforms.enumerated().map { Fixture.plan("n", "p\($0.offset)", payload: "{\"n\":\($0.offset)}", platform: $0.element) }
            + [Fixture.plan("n", "agent")]
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], now: now)
        // Processing until every push service has answered.
        #expect(try store.outcome("n", now: now)?.state == .processing)
        let pending = try store.pendingPush(now: now)
        #expect(pending.map(\.installationId) == ["p0", "p1", "p2", "p3"])
        #expect(pending[0].platform == .apns && pending[0].pushChannel == "channel-p0" && pending[0].payload == "{\"n\":0}")
        #expect(pending[0].headers == ["apns-priority": "10"] && pending[0].notificationId == "n")
        #expect(try store.pendingPush(now: now, limit: 2).count == 2)
        #expect(try store.backlog(now: now) == ["agent"])

        try store.pushed([
            (pending[0], .delivered), (pending[0], .delivered), (pending[1], .channelExpired(reason: "Unregistered")),
            (pending[2], .failed(outcome: "WrongToken", reason: "bad key")), (pending[3], .retry(reason: "503", after: nil)),
        ], now: now)
        #expect(try store.pendingPush(now: now).map(\.installationId) == ["p3"])
        // One waits for its retry: still Processing, with no end; the agent's delivery does not hold it.
        let waiting = try #require(try store.outcome("n", now: now))
        #expect(waiting.state == .processing && waiting.endedAt == nil)
        // Once that delivery has expired, nothing waits: Completed.
        #expect(try store.outcome("n", now: now.addingTimeInterval(3_601))?.state == .completed)
        try store.pushed([(pending[3], .delivered)], now: now)
        #expect(try store.outcome("n", now: now)?.state == .completed)
        let outcome = try #require(try store.outcome("n"))
        #expect(outcome.delivered == 2 && outcome.acknowledged == 2 && outcome.failed == 2 && outcome.targets == 5)
        #expect(outcome.platforms?["apns"] == ["Targets": 2, "Success": 2])
        #expect(outcome.platforms?["fcmv1"] == ["Targets": 1, "ExpiredChannel": 1])
        #expect(outcome.platforms?["browser"] == ["Targets": 1, "WrongToken": 1])
        // What the aggregate counts say beyond the push services' is the Linux agent's.
        #expect(outcome.platforms?["linux"] == ["Targets": 1, "Delivered": 0, "Success": 0, "Expired": 0, "Failed": 0])
    }

    @Test("outcomes per platform: the Linux agents' counts are what the totals say beyond the push services'",
          arguments: StoreEngine.available)
    func linuxDerivation(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let plans = [
            Fixture.plan("n", "a"), Fixture.plan("n", "b"), Fixture.plan("n", "c", expiresIn: 5), Fixture.plan("n", "d"),
            Fixture.plan("n", "p", platform: .apns, expiresIn: 5), Fixture.plan("n", "q", platform: .apns),
        ]
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: Set(plans.prefix(4).map(\.key)), now: now)
        _ = try store.acknowledge([plans[0].deliveryId], installationId: "a", now: now)
        try store.fail([DeliveryFailure(deliveryId: plans[1].deliveryId, reason: "gave up")], installationId: "b", now: now)
        let push = try store.pendingPush(now: now)
        try store.pushed([(try #require(push.first { $0.installationId == "q" }), .delivered)], now: now)
        #expect(try store.expire(now: now.addingTimeInterval(5)) == 2)
        let outcome = try #require(try store.outcome("n"))
        #expect(outcome.platforms?["apns"] == ["Targets": 2, "Success": 1, "Expired": 1])
        #expect(outcome.platforms?["linux"] == ["Targets": 4, "Delivered": 4, "Success": 1, "Expired": 1, "Failed": 1])
        #expect(try store.outcome("none")?.platforms == nil)
    }

    @Test("a test send keeps what became of its first ten targets", arguments: StoreEngine.available)
    func testResults(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        var plans = (0..<12).map { Fixture.plan("t", String(format: "d%02d", $0)) }
        plans[3] = Fixture.plan("t", "d03", platform: .apns)
        plans[4] = Fixture.plan("t", "d04", platform: .wns, unreachable: "PnsUnavailable")
        plans[5] = Fixture.plan("t", "d05", expiresIn: 5)
        try store.record(Fixture.notification("t", sequence: 1, test: true), plans: plans, sent: [], now: now)
        try store.record(Fixture.notification("plain", sequence: 2), plans: [Fixture.plan("plain", "d00")], sent: [], now: now)
        #expect(try store.testResults("plain") == nil)
        #expect(try store.testResults("none") == nil)

        _ = try store.acknowledge([plans[0].deliveryId, "plain/d00/native"], installationId: "d00", now: now)
        try store.fail([DeliveryFailure(deliveryId: plans[1].deliveryId, reason: "gave up")], installationId: "d01", now: now)
        let push = try #require(try store.pendingPush(now: now).first)
        try store.pushed([(push, .channelExpired(reason: "Unregistered"))], now: now)
        _ = try store.expire(now: now.addingTimeInterval(5))
        _ = try store.acknowledge([plans[11].deliveryId], installationId: "d11", now: now)

        let results = try #require(try store.testResults("t")).results
        #expect(results.map(\.installationId) == (0..<10).map { String(format: "d%02d", $0) })
        #expect(results[0].success && results[0].outcome == "The Notification was successfully sent to the Push Notification System")
        #expect(!results[1].success && results[1].outcome == "gave up")
        #expect(results[3].outcome == "The Push Notification System handle for the registration is invalid (Unregistered)")
        #expect(results[3].platform == "apns")
        #expect(results[4].outcome == "PnsUnavailable: the hub has no delivery path to wns installations")
        #expect(results[5].outcome == "Expired before the device acknowledged it")
        #expect(results[2].outcome == nil && !results[2].success && results[2].pushChannel == "channel-d02")
    }

    @Test("purge drops closed deliveries after a day, outcomes after a week, and what hangs on them", arguments: StoreEngine.available)
    func purge(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let day: TimeInterval = 86_400
        let old = [Fixture.plan("old", "a", expiresIn: 30 * day), Fixture.plan("old", "b")]
        try store.record(Fixture.notification("old", sequence: 1, test: true), plans: old, sent: [], now: now)
        try store.fail([DeliveryFailure(deliveryId: old[0].deliveryId, reason: "gave up")], installationId: "a", now: now)
        _ = try store.acknowledge([old[1].deliveryId], installationId: "b", now: now)
        let kept = Fixture.plan("kept", "a", expiresIn: 30 * day)
        try store.record(Fixture.notification("kept", sequence: 2), plans: [kept], sent: [], now: now)
        try store.heartbeat(id: "gone", endpoint: "tcp://gone", now: now)

        try store.purge(now: now.addingTimeInterval(2 * day))
        #expect(try store.outcome("old") != nil)
        #expect(try Fixture.rows("deliveries", in: store) == 1)
        #expect(try Fixture.rows("payloads", in: store) == 1)
        #expect(try store.liveDispatchers(now: now.addingTimeInterval(2 * day), within: 3 * day) == 0)

        try store.purge(now: now.addingTimeInterval(8 * day))
        #expect(try store.outcome("old") == nil)
        #expect(try store.testResults("old") == nil)
        #expect(try Fixture.rows("platform_outcomes", in: store) == 1)
        #expect(try store.outcome("kept") != nil)
        #expect(try store.pending(for: "a", now: now).map(\.deliveryId) == [kept.deliveryId])
    }

    @Test("totals count open deliveries and sum the outcomes", arguments: StoreEngine.available)
    func totals(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        #expect(try store.totals()["notificationsTotal"] == "0")
        let plans = [Fixture.plan("n", "a"), Fixture.plan("n", "b"), Fixture.plan("n", "c")]
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [plans[0].key], now: now)
        try store.record(Fixture.notification("m", sequence: 2), plans: [], sent: [], now: now)
        _ = try store.acknowledge([plans[0].deliveryId], installationId: "a", now: now)
        let totals = try store.totals()
        #expect(totals["pendingDeliveries"] == "2" && totals["notificationsTotal"] == "2" && totals["targetsTotal"] == "3")
        #expect(totals["deliveredTotal"] == "1" && totals["acknowledgedTotal"] == "1" && totals["failedTotal"] == "0")
    }

    @Test("outcome rows are written in the order of their ids: openings many to a statement, a run ending before an id with counts only, each row's counts after its opening")
    func outcomeStepsKeepIdOrder() {
        func opening(adds: Bool) -> OutcomeOpening {
            OutcomeOpening(state: .completed, enqueuedAt: now, at: now, targets: 1, expired: 0, adds: adds)
        }
        var tally = OutcomeTally()
        for (id, adds) in [("a", false), ("b", false), ("c", false), ("d", true), ("f", false)] { tally.open(id, opening(adds: adds)) }
        tally.add("b") { $0.delivered += 1 }
        tally.add("e") { $0.acknowledged += 1 }
        tally.add("g") { _ in }
        #expect(tally.outcomeSteps(rowsPerStatement: 2) == [
            .open(adds: false, ids: ["a", "b"]), .count("b"), .open(adds: false, ids: ["c"]), .open(adds: true, ids: ["d"]), .count("e"),
            .open(adds: false, ids: ["f"]),
        ])
        // Random tallies: the rows touched go up, each opened once and counted once after its opening.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            var tally = OutcomeTally()
            for index in 0..<Int.random(in: 0..<150, using: &generator) {
                let id = String(format: "n%03d", Int.random(in: 0..<200, using: &generator))
                if Bool.random(using: &generator) { tally.open(id, opening(adds: index % 7 == 0)) }
                if Bool.random(using: &generator) { tally.add(id) { $0.delivered += 1 } }
            }
            let steps = tally.outcomeSteps(rowsPerStatement: 64)
            var touched: [String] = []
            var opened = Set<String>(), counted = Set<String>()
            for step in steps {
                switch step {
                case .open(let adds, let ids):
                    #expect(!ids.isEmpty && ids.count <= 64 && ids.allSatisfy { tally.openings[$0]?.adds == adds })
                    touched += ids
                    opened.formUnion(ids)
                case .count(let id):
                    #expect(tally.openings[id] == nil || opened.contains(id), "a row's counts after its opening")
                    #expect(counted.insert(id).inserted)
                    if tally.openings[id] == nil { touched.append(id) }
                }
            }
            #expect(touched == touched.sorted() && Set(touched).count == touched.count)
            #expect(opened == Set(tally.openings.keys) && counted == Set(tally.counts.keys))
        }
    }

    @Test("a statement's text for many rows is made once per row count and is the same text; past the limit it is made each time")
    func rememberedTexts() {
        let made = Mutex(0)
        let text = DeliverySQL.remembered(upTo: 4) { rows in
            made.withLock { $0 += 1 }
            return DeliverySQL.outcomeValues(rows: rows, marker: "?")
        }
        for rows in [1, 2, 4, 1, 2, 4, 4] { #expect(text(rows) == DeliverySQL.outcomeValues(rows: rows, marker: "?")) }
        #expect(made.withLock { $0 } == 3)
        #expect(text(2) == "(?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7), (?8, ?9, ?10, ?11, ?11, ?12, ?13, ?14)")
        _ = text(5)
        _ = text(5)
        #expect(made.withLock { $0 } == 5)
    }

    @Test("a turn of many notifications opens each outcome, many to a statement, and moves the cursors once, to the last; a turn that fails moves neither",
          arguments: StoreEngine.available)
    func manyInOneTurn(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let all = Set(0..<Shards.count)
        // 150 notifications: past two statements' worth of outcome rows, with and without shards.
        try store.writeTurn {
            for index in 1...150 {
                let id = "many-\(index)"
                let plans = index % 3 == 0 ? [Fixture.plan(id, "a")] : []
                try store.record(Fixture.notification(id, sequence: UInt64(index)), plans: plans, sent: Set(plans.map(\.key)), now: now)
                // The cursor as the turn reads it is already where it records to.
                if index == 75 { #expect(try store.cursor() == 75) }
            }
        }
        try store.flush()
        #expect(try store.cursor() == 150)
        for index in 1...150 {
            let outcome = try #require(try store.outcome("many-\(index)"))
            if index % 3 == 0 {
                #expect(outcome.state == .completed && outcome.targets == 1 && outcome.delivered == 1, "\(index)")
            } else {
                #expect(outcome.state == .noTargetFound && outcome.targets == 0, "\(index)")
            }
        }
        // With shards, outcomes added to, as several dispatchers write them: twice over adds up.
        for _ in 0..<2 {
            try store.writeTurn {
                for index in 151...220 {
                    let id = "shared-\(index)"
                    try store.record(Fixture.notification(id, sequence: UInt64(index)), plans: [Fixture.plan(id, "s\(index)")], sent: [], shards: all, now: now)
                }
            }
        }
        try store.flush()
        for index in [151, 190, 220] {
            let outcome = try #require(try store.outcome("shared-\(index)"))
            #expect(outcome.state == .completed && outcome.targets == 1, "recorded again, a delivery already stored counts once")
        }
        #expect(try store.shardCursors().values.allSatisfy { $0 == 220 })
        struct Refused: Error {}
        #expect(throws: Refused.self) {
            try store.writeTurn {
                try store.record(Fixture.notification("late", sequence: 300), plans: [], sent: [], now: now)
                // A shard's cursor reads as no less than the one dispatcher's, as the store's own would.
                #expect(try store.shardCursors()[0] == 300)
                try store.record(Fixture.notification("late-shared", sequence: 301), plans: [], sent: [], shards: all, now: now)
                #expect(try store.cursor() == 300 && store.shardCursors()[0] == 301)
                throw Refused()
            }
        }
        #expect(try store.cursor() == 150 && store.outcome("late") == nil)
        #expect(try store.shardCursors().values.allSatisfy { $0 == 220 })
        try store.writeTurn { try store.record(Fixture.notification("after", sequence: 151), plans: [], sent: [], now: now) }
        try store.flush()
        #expect(try store.cursor() == 151, "a failed turn leaves nothing to move the cursor later")
    }

    @Test("a turn's writes stand or fall together, and what was flushed is there after a reopen", arguments: StoreEngine.available)
    func turns(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        struct Refused: Error {}
        #expect(throws: Refused.self) {
            try store.writeTurn {
                try store.record(Fixture.notification("lost", sequence: 1), plans: [Fixture.plan("lost", "a")], sent: [], now: now)
                throw Refused()
            }
        }
        #expect(try store.outcome("lost") == nil && store.cursor() == 0 && store.pending(for: "a", now: now).isEmpty)
        let plan = Fixture.plan("kept", "a")
        try store.writeTurn {
            try store.record(Fixture.notification("kept", sequence: 2), plans: [plan], sent: [plan.key], now: now)
            try store.markSent([Fixture.delivery(plan, of: "kept")], now: now)
        }
        try store.writeTurn { _ = try store.acknowledge([plan.deliveryId], installationId: "a", now: now) }
        try store.flush()
        let reopened = try reopen(store)
        #expect(try reopened.cursor() == 2)
        let outcome = try #require(try reopened.outcome("kept"))
        #expect(outcome.delivered == 1 && outcome.acknowledged == 1)
        try store.close()
    }

    /// A second store on the same database.
    private func reopen(_ store: any DeliveryStore) throws -> any DeliveryStore {
        if let store = store as? GroupedStore {
            return GroupedStore(try SQLiteDeliveryStore(database: try SQLiteDatabase(path: store.inner.database.path)))
        }
        if let store = store as? SQLiteDeliveryStore {
            return try SQLiteDeliveryStore(database: try SQLiteDatabase(path: store.database.path))
        }
        let store = try #require(store as? PostgresDeliveryStore)
        return try PostgresDeliveryStore(url: store.url)
    }

    // MARK: Shards

    @Test("each owned shard's cursor moves to what was recorded for it, never back; the one cursor stays",
          arguments: StoreEngine.available)
    func shardCursors(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        #expect(try store.shardCursors() == Dictionary(uniqueKeysWithValues: (0..<Shards.count).map { ($0, UInt64(0)) }))
        try store.record(Fixture.notification("n5", sequence: 5), plans: [], sent: [], shards: [1, 2], now: now)
        try store.record(Fixture.notification("n3", sequence: 3), plans: [], sent: [], shards: [2, 3], now: now)
        var cursors = try store.shardCursors()
        #expect(cursors[1] == 5 && cursors[2] == 5 && cursors[3] == 3 && cursors[0] == 0)
        #expect(try store.cursor() == 0)
        // What one dispatcher planned counts for every shard.
        try store.record(Fixture.notification("n4", sequence: 4), plans: [], sent: [], now: now)
        cursors = try store.shardCursors()
        #expect(cursors[1] == 5 && cursors[3] == 4 && cursors[63] == 4)
    }

    @Test("backlog and push reads keep to the shards asked for", arguments: StoreEngine.available)
    func shardReads(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (a, b) = (Fixture.installation(inShard: 4), Fixture.installation(inShard: 9))
        let (pa, pb) = (Fixture.installation(inShard: 4, "p"), Fixture.installation(inShard: 9, "p"))
        let plans = [Fixture.plan("n", a), Fixture.plan("n", b), Fixture.plan("n", pa, platform: .apns), Fixture.plan("n", pb, platform: .apns)]
        try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [], shards: [4, 9], now: now)
        #expect(try store.backlog(now: now, shards: [4]) == [a])
        #expect(try store.backlog(now: now, shards: [9, 10]) == [b])
        #expect(try store.backlog(now: now, shards: []).isEmpty)
        #expect(try store.backlog(now: now, shards: nil) == [a, b])
        #expect(try store.pendingPush(now: now, limit: 10, shards: [9]).map(\.installationId) == [pb])
        #expect(try store.pendingPush(now: now, limit: 10, shards: nil).count == 2)
    }

    @Test("leases: claimed only where vacant or expired, renewed, released, and their owners' endpoints known",
          arguments: StoreEngine.available)
    func leases(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let until = now.addingTimeInterval(10)
        let first = try store.claimLeases(owner: "d1", endpoint: "tcp://d1", count: 40, now: now, until: until)
        #expect(first == Dictionary(uniqueKeysWithValues: (0..<40).map { ($0, UInt64(1)) }))
        let second = try store.claimLeases(owner: "d2", endpoint: "tcp://d2", count: 40, now: now, until: until)
        #expect(second == Dictionary(uniqueKeysWithValues: (40..<64).map { ($0, UInt64(1)) }))
        #expect(try store.claimLeases(owner: "d3", endpoint: "tcp://d3", count: 1, now: now, until: until).isEmpty)
        #expect(try store.claimLeases(owner: "d3", endpoint: "tcp://d3", count: 0, now: now.addingTimeInterval(60), until: until).isEmpty)
        var owners = try store.leaseOwners(now: now)
        #expect(owners.count == 64 && owners[0] == "tcp://d1" && owners[63] == "tcp://d2")

        // d1 renews; d2's leases expire, and another takes them.
        #expect(try store.renewLeases(owner: "d1", until: now.addingTimeInterval(30)) == first)
        let later = now.addingTimeInterval(10)
        #expect(try store.leaseOwners(now: later).count == 40)
        // Each claim moves the shard's epoch on.
        #expect(try store.claimLeases(owner: "d3", endpoint: "tcp://d3", count: 64, now: later, until: later.addingTimeInterval(10))
                == second.mapValues { $0 + 1 })
        #expect(try store.renewLeases(owner: "d2", until: later.addingTimeInterval(10)).isEmpty)

        // Released, a shard is free at once.
        try store.releaseLeases(owner: "d2", shards: [0])
        try store.releaseLeases(owner: "d1", shards: [0, 1])
        owners = try store.leaseOwners(now: later)
        #expect(owners[0] == nil && owners[1] == nil && owners[2] == "tcp://d1" && owners[40] == "tcp://d3")
        #expect(try store.claimLeases(owner: "d3", endpoint: "tcp://d3", count: 5, now: later, until: later.addingTimeInterval(10)) == [0: 2, 1: 2])
        #expect(try store.renewLeases(owner: "d1", until: later.addingTimeInterval(10)) == first.filter { $0.key >= 2 })
    }

    @Test("a fenced write commits only while its writer holds each shard it writes for at the epoch it knows; else nothing of it stays",
          arguments: StoreEngine.available)
    func fence(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (a, b) = (Fixture.installation(inShard: 4), Fixture.installation(inShard: 9))
        let claimed = try store.claimLeases(owner: "d1", endpoint: "tcp://d1", count: 64, now: now, until: now.addingTimeInterval(10))
        store.fence = LeaseFence(owner: "d1", epochs: claimed)
        let first = [Fixture.plan("n1", a), Fixture.plan("n1", b)]
        try store.writeTurn {
            try store.record(Fixture.notification("n1", sequence: 1), plans: first, sent: [], shards: [4, 9], now: now)
        }
        try store.flush()
        #expect(try store.outcome("n1")?.targets == 2)

        // d1's leases run out and d2 claims them, at the next epoch: d1's fence is stale.
        let later = now.addingTimeInterval(11)
        let taken = try store.claimLeases(owner: "d2", endpoint: "tcp://d2", count: 64, now: later, until: later.addingTimeInterval(10))
        #expect(taken[4] == (claimed[4] ?? 0) + 1)
        let second = [Fixture.plan("n2", a), Fixture.plan("n2", b)]
        do {
            try store.writeTurn {
                try store.record(Fixture.notification("n2", sequence: 2), plans: second, sent: [], shards: [4, 9], now: now)
                try store.acknowledge([first[0].deliveryId], installationId: a, now: now)
            }
            Issue.record("a write for shards another dispatcher holds commits")
        } catch let lost as LeaseLost {
            #expect(lost.shards == [4, 9])
        }
        try store.flush()
        // Nothing of it stays: no outcome, no delivery, no cursor moved, the acknowledged delivery still open.
        #expect(try store.outcome("n2") == nil)
        #expect(try store.pending(for: a, now: now).map(\.deliveryId) == [first[0].deliveryId])
        #expect(try store.shardCursors()[4] == 1 && store.shardCursors()[9] == 1)
        #expect(try store.outcome("n1")?.acknowledged == 0)
        // Expiry, acknowledgements and failures are fenced alike.
        #expect(throws: LeaseLost.self) { try store.expire(now: now.addingTimeInterval(7_200), shards: [4]) }
        #expect(throws: LeaseLost.self) { try store.acknowledge([first[1].deliveryId], installationId: b, now: now) }
        #expect(try store.totals()["pendingDeliveries"] == "2")

        // The new holder writes; a shard its fence does not list is refused without asking the store.
        store.fence = LeaseFence(owner: "d2", epochs: taken)
        try store.writeTurn {
            try store.record(Fixture.notification("n2", sequence: 2), plans: second, sent: [], shards: [4, 9], now: now)
        }
        try store.flush()
        #expect(try store.outcome("n2")?.targets == 2 && store.shardCursors()[4] == 2)
        store.fence = LeaseFence(owner: "d2", epochs: taken.filter { $0.key != 4 })
        #expect(throws: LeaseLost.self) { try store.acknowledge([first[0].deliveryId], installationId: a, now: now) }
        #expect(try store.acknowledge([first[1].deliveryId], installationId: b, now: now) == 1)
    }

    @Test("a delivery recorded again for its shard, as by two dispatchers, counts once in the targets, on every platform",
          arguments: StoreEngine.available)
    func recordedTwice(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (a, p) = (Fixture.installation(inShard: 4), Fixture.installation(inShard: 4, "p"))
        let plans = [Fixture.plan("n", a), Fixture.plan("n", p, platform: .apns)]
        for _ in 0..<2 {
            try store.record(Fixture.notification("n", sequence: 1), plans: plans, sent: [plans[0].key], shards: [4], now: now)
        }
        let outcome = try #require(try store.outcome("n"))
        #expect(outcome.targets == 2 && outcome.delivered == 1)
        #expect(outcome.platforms?["apns"]?["Targets"] == 1 && outcome.platforms?["linux"]?["Targets"] == 1)
    }

    @Test("heartbeats tell how many dispatchers are alive", arguments: StoreEngine.available)
    func heartbeats(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        try store.heartbeat(id: "d1", endpoint: "tcp://old", now: now)
        try store.heartbeat(id: "d1", endpoint: "tcp://d1", now: now.addingTimeInterval(5))
        try store.heartbeat(id: "d2", endpoint: "tcp://d2", now: now)
        #expect(try store.liveDispatchers(now: now.addingTimeInterval(6), within: 10) == 2)
        #expect(try store.liveDispatchers(now: now.addingTimeInterval(12), within: 10) == 1)
    }
}
