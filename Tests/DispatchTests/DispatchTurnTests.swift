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
        turn.records = [(Fixture.notification("n", sequence: 1), plans, [4, 9])]
        turn.sent = plans.map { Fixture.delivery($0, of: "n") }
        turn.acks = [(a, ["x/\(a)"]), (b, ["x/\(b)"])]
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
    @Test("not before 50 ms; then at once when nothing is held or the agents were quiet for 100 ms, else once the group is 2 s old")
    func due() {
        let start = ContinuousClock.now
        func at(_ ms: Int) -> ContinuousClock.Instant { start + .milliseconds(ms) }
        var policy = GroupCommitPolicy(now: start)
        #expect(!policy.due(at: at(49), held: 5) && policy.due(at: at(50), held: 5))
        // Sends and acknowledgements under way: the acknowledgements still coming may spare rows.
        policy.wrote(active: true, at: at(40))
        #expect(!policy.due(at: at(60), held: 5) && !policy.due(at: at(139), held: 5) && policy.due(at: at(140), held: 5))
        #expect(policy.due(at: at(60), held: 0), "nothing held: nothing to wait for")
        policy.wrote(active: false, at: at(150))
        #expect(policy.due(at: at(150), held: 5))
        policy.committed(at: at(150))
        #expect(!policy.due(at: at(199), held: 5) && policy.due(at: at(200), held: 5))
        // Agents that never fall quiet: the group still commits once 2 s old.
        for ms in stride(from: 160, through: 2_200, by: 20) {
            policy.wrote(active: true, at: at(ms))
            #expect(policy.due(at: at(ms), held: 5) == (ms >= 2_150))
        }
    }
}
