import Foundation
import HubProtocol
import Testing

@testable import DispatchCore

/// The dispatcher's side of broadcasts stored once: who is parked, what each is owed when it
/// comes back, and what a tag change while away keeps.
@Suite("Parked broadcasts")
struct ParkedBroadcastTests {
    typealias T = DispatcherTests
    static let t0 = DispatcherTests.t0

    static func change(_ id: String, tags: [String], version: UInt64) -> DispatchEvent {
        var installation = T.installation(id, key: T.keyA, tags: tags)
        installation.version = version
        return .installationChanged(InstallationChanged(change: .upserted, installationId: id, installation: installation))
    }

    static func record(_ actions: [DispatchAction]) -> ([PlannedDelivery], ParkedCounts)? {
        for action in actions { if case .record(_, let plans, _, let parked) = action { return (plans, parked) } }
        return nil
    }

    static func owed(_ actions: [DispatchAction]) -> [String]? {
        for action in actions {
            if case .load(_, _, _, let owed) = action { return owed.map(\.plan.deliveryId) }
        }
        return nil
    }

    @Test("a broadcast parks the agents away, by shard, and plans those here; a send to installations, a user or a test send does not park")
    func parks() {
        var dispatcher = T.dispatcher(
            [T.installation("a", key: T.keyA), T.installation("b", key: T.keyB), T.installation("c", key: T.keyB, tags: ["Sports"])],
            connected: [(T.routeA, "a", T.keyA)])
        let (plans, parked) = Self.record(dispatcher.on(.accepted([T.send(1)]), now: Self.t0))!
        #expect(plans.map(\.installationId) == ["a"])
        #expect(parked == ParkedCounts(counts: [Shards.of("b"): 1], registryAt: 1))
        #expect(dispatcher.parked.map(\.notification.notificationId) == ["n1"])
        var direct = T.send(2)
        direct.send.tagExpression = nil
        direct.send.installationId = "b"
        #expect(Self.record(dispatcher.on(.accepted([direct]), now: Self.t0))?.1.counts.isEmpty == true)
        var test = T.send(3)
        test.send.test = true
        #expect(Self.record(dispatcher.on(.accepted([test]), now: Self.t0))?.0.map(\.installationId) == ["a", "b"])
        #expect(dispatcher.parked.count == 1 && dispatcher.counters.parked == 1)
    }

    @Test("an agent coming back is owed the broadcasts parked since its version that reach it now; one registered after a broadcast is not")
    func owedAtHello() {
        var dispatcher = T.dispatcher([T.installation("b", key: T.keyB), T.installation("c", key: T.keyB, tags: ["Sports"])])
        _ = dispatcher.on(.accepted([T.send(1), T.send(2, tag: "Sports"), T.send(3)]), now: Self.t0)
        // Registered after the three: owed none of them.
        _ = dispatcher.on(Self.change("late", tags: ["World"], version: 9), now: Self.t0)
        _ = dispatcher.on(.accepted([T.send(4)]), now: Self.t0)
        let hello = dispatcher.on(.hello(route: T.routeB, peerKey: T.keyB, installationId: "b"), now: Self.t0)
        #expect(Self.owed(hello) == ["n1/b/t", "n3/b/t", "n4/b/t"])
        let late = dispatcher.on(.hello(route: T.routeA, peerKey: T.keyA, installationId: "late"), now: Self.t0)
        #expect(Self.owed(late) == ["n4/late/t"])
        // Away again: a broadcast to everyone is parked and owed alike (the store keeps what is
        // after its position); one to another hub's everyone is not.
        _ = dispatcher.on(.bye(route: T.routeA, installationId: "late"), now: Self.t0)
        var everyone = T.send(6)
        everyone.send.tagExpression = nil
        var elsewhere = T.send(7)
        elsewhere.send.tagExpression = nil
        elsewhere.send.hub = "other"
        _ = dispatcher.on(.accepted([everyone, elsewhere]), now: Self.t0)
        let back = dispatcher.on(.hello(route: T.routeA, peerKey: T.keyA, installationId: "late"), now: Self.t0)
        #expect(Self.owed(back) == ["n4/late/t", "n6/late/t"])
        // Here now: what comes is planned for it, not parked.
        let (plans, parked) = Self.record(dispatcher.on(.accepted([T.send(5)]), now: Self.t0))!
        #expect(Set(plans.map(\.installationId)) == ["b", "late"] && parked.counts.isEmpty)
    }

    @Test("a tag added while away brings nothing older; a tag removed stops what it brought; what still reaches it is kept as its own")
    func tagsChangeAway() {
        var dispatcher = T.dispatcher([
            T.installation("x", key: T.keyA, tags: ["World"]), T.installation("y", key: T.keyA, tags: ["World"]),
        ])
        _ = dispatcher.on(.accepted([T.send(1), T.send(2, tag: "Sports")]), now: Self.t0)
        // x swaps World for Sports: n1 (World) stops, n2 (Sports, before the tag) does not come.
        #expect(!dispatcher.on(Self.change("x", tags: ["Sports"], version: 5), now: Self.t0).contains { if case .keepOwed = $0 { true } else { false } })
        // y adds News: n1 still reaches it, and becomes its own delivery before its version moves past it.
        let kept = dispatcher.on(Self.change("y", tags: ["World", "News"], version: 6), now: Self.t0)
        #expect(kept.contains { if case .keepOwed("y", let owed) = $0 { owed.map(\.plan.deliveryId) == ["n1/y/t"] } else { false } })
        #expect(dispatcher.backlogCount == 1)
        _ = dispatcher.on(.accepted([T.send(3, tag: "Sports"), T.send(4, tag: "News")]), now: Self.t0)
        #expect(Self.owed(dispatcher.on(.hello(route: T.routeA, peerKey: T.keyA, installationId: "x"), now: Self.t0)) == ["n3/x/t"])
        #expect(Self.owed(dispatcher.on(.hello(route: T.routeB, peerKey: T.keyA, installationId: "y"), now: Self.t0)) == ["n4/y/t"])
    }

    @Test("a hello naming a registration the index has not read yet is told to come again; once read, it catches up as registered")
    func helloAfterRegistration() {
        var dispatcher = T.dispatcher([T.installation("x", key: T.keyA, tags: ["World"])])
        _ = dispatcher.on(.accepted([T.send(1)]), now: Self.t0)
        let early = dispatcher.on(.hello(route: T.routeA, peerKey: T.keyA, installationId: "x", registered: 5), now: Self.t0)
        #expect(T.errors(early) == [.unavailable] && dispatcher.sessionCount == 0)
        // Its agent registered Sports in place of World while away: n1 stops.
        _ = dispatcher.on(Self.change("x", tags: ["Sports"], version: 5), now: Self.t0)
        let hello = dispatcher.on(.hello(route: T.routeA, peerKey: T.keyA, installationId: "x", registered: 5), now: Self.t0)
        #expect(Self.owed(hello) == nil && dispatcher.sessionCount == 1 && hello.contains(.position("x", .here)))
        // With nothing parked in its shard, it has nothing to catch up on: welcomed whatever the index has.
        var quiet = T.dispatcher([T.installation("x", key: T.keyA, tags: ["World"])])
        let welcomed = quiet.on(.hello(route: T.routeA, peerKey: T.keyA, installationId: "x", registered: 5), now: Self.t0)
        #expect(T.errors(welcomed).isEmpty && quiet.sessionCount == 1)
    }

    @Test("an agent leaving writes where it left; an expired broadcast is owed to no one and forgotten; a shard elsewhere is not parked here")
    func positionsAndExpiry() {
        var dispatcher = T.dispatcher([T.installation("a", key: T.keyA)], connected: [(T.routeA, "a", T.keyA)])
        _ = dispatcher.on(.accepted([T.send(1)]), now: Self.t0)
        #expect(dispatcher.on(.bye(route: T.routeA, installationId: "a"), now: Self.t0).first == .position("a", .away(after: 1)))
        _ = dispatcher.on(.accepted([T.send(2, ttl: 10)]), now: Self.t0)
        #expect(dispatcher.parked.count == 1)
        _ = dispatcher.on(.tick, now: Self.t0.addingTimeInterval(11))
        #expect(dispatcher.parked.isEmpty)
        let hello = dispatcher.on(.hello(route: T.routeB, peerKey: T.keyA, installationId: "a"), now: Self.t0.addingTimeInterval(12))
        // Owed nothing: n1, unacknowledged when it left, loads from the store (which marks it here).
        #expect(Self.owed(hello) == [])
        _ = dispatcher.on(.loaded(installationId: "a", route: T.routeB, [], complete: true), now: Self.t0.addingTimeInterval(12))
        _ = dispatcher.on(.bye(route: T.routeB, installationId: "a"), now: Self.t0.addingTimeInterval(12))
        // With nothing pending and nothing owed, a hello is welcomed at once and marked here.
        let again = dispatcher.on(.hello(route: T.routeA, peerKey: T.keyA, installationId: "a"), now: Self.t0.addingTimeInterval(13))
        #expect(again.contains(.position("a", .here)) && Self.owed(again) == nil)
        // Parked broadcasts read from the store at start, with the cursor the next position is from.
        var restarted = T.dispatcher([T.installation("a", key: T.keyA)])
        _ = restarted.on(.parked([ParkedBroadcast(notification: T.send(7), shards: [Shards.of("a"): 1])], cursor: 9), now: Self.t0)
        #expect(Self.owed(restarted.on(.hello(route: T.routeA, peerKey: T.keyA, installationId: "a"), now: Self.t0)) == ["n7/a/t"])
        #expect(restarted.on(.bye(route: T.routeA, installationId: "a"), now: Self.t0).first == .position("a", .away(after: 9)))
    }
}
