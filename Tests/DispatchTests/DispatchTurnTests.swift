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
    @Test("not before 50 ms; then at once when nothing was sent in the last 100 ms, else once that has passed or the group is a second old")
    func due() {
        let start = ContinuousClock.now
        func at(_ ms: Int) -> ContinuousClock.Instant { start + .milliseconds(ms) }
        var policy = GroupCommitPolicy(now: start)
        #expect(!policy.due(at: at(49)) && policy.due(at: at(50)))
        // A send: its acknowledgement may spare the row, so the group waits for it.
        policy.wrote(sent: true, at: at(40))
        #expect(!policy.due(at: at(60)) && !policy.due(at: at(139)) && policy.due(at: at(140)))
        policy.wrote(sent: false, at: at(150))
        #expect(policy.due(at: at(150)))
        policy.committed(at: at(150))
        #expect(!policy.due(at: at(199)) && policy.due(at: at(200)))
        // Sends that never stop: the group still commits once a second old.
        for ms in stride(from: 160, through: 1_200, by: 20) {
            policy.wrote(sent: true, at: at(ms))
            #expect(policy.due(at: at(ms)) == (ms >= 1_150))
        }
    }
}

