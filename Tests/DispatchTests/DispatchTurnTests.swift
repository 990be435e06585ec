import DispatchCore
import Foundation
import HubProtocol
import Push
import Testing

@testable import NHDispatch

@Suite("A dispatcher's turn")
struct DispatchTurnTests {
    static func turn(_ a: String, _ b: String) -> DispatchTurn {
        let plans = [Fixture.plan("n", a), Fixture.plan("n", b)]
        var turn = DispatchTurn()
        turn.records = [(Fixture.notification("n", sequence: 1), plans, [4, 9], Fixture.now, ParkedCounts())]
        turn.sent = plans.map { Fixture.delivery($0, of: "n") }
        turn.acks = [(a, [DeliveryKey("x/\(a)")]), (b, [DeliveryKey("x/\(b)")])]
        turn.failures = [(b, [DeliveryFailure(deliveryId: "y/\(b)", reason: "gone")])]
        let message = PushMessage(
            deliveryId: "p", notificationId: "n", installationId: a, platform: .apns, pushChannel: "c", payload: "{}", headers: [:],
            expiresAt: Fixture.now)
        turn.pushes = [message]
        turn.pushResults = [(message, .delivered)]
        return turn
    }

    @Test("keeping the shards still held drops every piece of work of the others, and a record left with no shard")
    func keep() {
        let (a, b) = (Fixture.installation(inShard: 4), Fixture.installation(inShard: 9))
        var turn = Self.turn(a, b)
        turn.keep(shards: [4])
        #expect(turn.records.count == 1 && turn.records[0].1.map(\.installationId) == [a] && turn.records[0].2 == [4])
        #expect(turn.sent.map(\.installationId) == [a] && turn.acks.map(\.0) == [a] && turn.failures.isEmpty)
        #expect(turn.pushes.count == 1 && turn.pushResults.count == 1)
        turn.keep(shards: [9])
        #expect(turn.isEmpty)
    }

    @Test("a group that records a notification again marks sent the deliveries an earlier group planned, and writes each record as of when it was planned",
          arguments: StoreEngine.available)
    func writtenLater(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let plans = [Fixture.plan("n", "a"), Fixture.plan("n", "b")]
        var first = DispatchTurn()
        first.records = [(Fixture.notification("n", sequence: 1, expiresIn: 1), plans, nil, Fixture.now, ParkedCounts())]
        // Written 5 s after it was planned, past the notification's expiry: still as of its planning.
        try store.writeTurn { try first.write(to: store, now: Fixture.now.addingTimeInterval(5)) }
        try store.flush()
        var outcome = try #require(try store.outcome("n", now: Fixture.now))
        #expect(outcome.state == .completed && outcome.targets == 2 && outcome.expired == 0)
        // The next group sends one of them, and records the notification again with nothing left to plan.
        var second = DispatchTurn()
        second.records = [(Fixture.notification("n", sequence: 1, expiresIn: 1), [], nil, Fixture.now, ParkedCounts())]
        second.sent = [Fixture.delivery(plans[0], of: "n")]
        try store.writeTurn { try second.write(to: store, now: Fixture.now) }
        try store.flush()
        outcome = try #require(try store.outcome("n", now: Fixture.now))
        #expect(outcome.delivered == 1 && outcome.targets == 2)
    }

    @Test("a failed turn gives the next its sends, acknowledgements, failures and push answers, never its records or pushes")
    func retry() {
        let (a, b) = (Fixture.installation(inShard: 4), Fixture.installation(inShard: 9))
        var next = DispatchTurn()
        next.acks = [("later", ["z"])]
        next.retry(Self.turn(a, b))
        #expect(next.records.isEmpty && next.pushes.isEmpty)
        #expect(next.sent.count == 2 && next.failures.count == 1 && next.pushResults.count == 1)
        #expect(next.acks.map(\.0) == [a, b, "later"])
    }
}

@Suite("When a group of writes commits")
struct GroupCommitPolicyTests {
    @Test("not before 50 ms; then at once when nothing is held or nothing sent awaits its acknowledgement, else once the group is 2 s old")
    func due() {
        let start = ContinuousClock.now
        func at(_ ms: Int) -> ContinuousClock.Instant { start + .milliseconds(ms) }
        var policy = GroupCommitPolicy(now: start)
        #expect(!policy.due(at: at(49), held: 5, awaited: 0) && policy.due(at: at(50), held: 5, awaited: 0))
        #expect(policy.due(at: at(50), held: 0, awaited: 7), "nothing held: nothing to wait for")
        // Acknowledgements still to come may spare rows, however long the agents are silent.
        #expect(!policy.due(at: at(60), held: 5, awaited: 7) && !policy.due(at: at(1_999), held: 5, awaited: 7))
        #expect(policy.due(at: at(2_000), held: 5, awaited: 7), "the group is 2 s old")
        policy.committed(at: at(2_000))
        #expect(!policy.due(at: at(2_049), held: 0, awaited: 0) && policy.due(at: at(2_050), held: 5, awaited: 0))
    }

    @Test("turns gathered in memory are written when the group is due, counting their planned deliveries as held; at once with a push")
    func gathered() {
        let start = ContinuousClock.now
        func at(_ ms: Int) -> ContinuousClock.Instant { start + .milliseconds(ms) }
        var policy = GroupCommitPolicy(now: start)
        let plans = [Fixture.plan("n", "a"), Fixture.plan("n", "b")]
        var turn = DispatchTurn()
        turn.records = [(Fixture.notification("n", sequence: 1), plans, nil, Fixture.now, ParkedCounts())]
        turn.sent = plans.map { Fixture.delivery($0, of: "n") }
        #expect(turn.planned == 2)
        #expect(!policy.writes(gathered: turn, at: at(10), awaited: 0), "younger than 50 ms")
        #expect(!policy.writes(gathered: turn, at: at(60), awaited: 2), "both deliveries await their acknowledgements")
        turn.acks = [("a", [plans[0].key]), ("b", [plans[1].key])]
        #expect(policy.writes(gathered: turn, at: at(70), awaited: 0))
        policy.committed(at: at(70))
        // Only acknowledgements gathered: nothing held, written once the group is 50 ms old.
        var acks = DispatchTurn()
        acks.acks = [("b", [plans[1].key])]
        #expect(!policy.writes(gathered: acks, at: at(110), awaited: 9) && policy.writes(gathered: acks, at: at(120), awaited: 9))
        // A turn that hands deliveries to push services is written at once: they go once their rows are in.
        turn.pushes = [PushMessage(
            deliveryId: "p", notificationId: "n", installationId: "c", platform: .apns, pushChannel: "c", payload: "{}", headers: [:],
            expiresAt: Fixture.now)]
        #expect(policy.writes(gathered: turn, at: at(71), awaited: 9))
        // So is one that carries push services' answers.
        var answers = DispatchTurn()
        answers.pushResults = [(turn.pushes[0], .delivered)]
        #expect(policy.writes(gathered: answers, at: at(71), awaited: 9))
    }
}
