import DispatchCore
import Foundation
import HubProtocol
import Testing

/// The dispatcher's decisions, event by event, with no socket, store or clock.
@Suite("Dispatcher state machine")
struct DispatcherTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    static let keyA = String(repeating: "a", count: 40)
    static let keyB = String(repeating: "b", count: 40)
    static let routeA = Data("route-a".utf8)
    static let routeB = Data("route-b".utf8)

    static func installation(_ id: String, key: String, tags: [String] = ["World"], user: String? = nil) -> Installation {
        Installation(
            installationId: id, pushChannel: key, tags: tags, userId: user,
            templates: ["t": InstallationTemplate(body: #"{"m":"$(m)"}"#)])
    }

    /// The code of a refusal sent back on a route.
    static func refusal(_ action: DispatchAction?) -> ErrorCode? {
        guard case .reply(_, .error(let error))? = action else { return nil }
        return error.code
    }

    static func send(_ sequence: UInt64, tag: String = "World", ttl: TimeInterval = 3_600) -> AcceptedNotification {
        AcceptedNotification(
            sequence: sequence, notificationId: "n\(sequence)",
            send: SendNotification(format: .template, properties: ["m": "hello \(sequence)"], tagExpression: tag),
            enqueuedAt: t0, expiresAt: t0.addingTimeInterval(ttl))
    }

    /// A dispatcher that knows `installations` and has `connected` sessions on routes named after them.
    /// Settings that give every target a delivery of its own, agents away too, as before
    /// broadcasts were stored once: for tests of what happens to each delivery.
    static var perDevice: DispatcherSettings {
        var settings = DispatcherSettings()
        settings.parkBroadcasts = false
        return settings
    }

    static func dispatcher(
        _ installations: [Installation], connected: [(Route, String, String)] = [], settings: DispatcherSettings = DispatcherSettings()
    ) -> Dispatcher {
        var dispatcher = Dispatcher(settings: settings)
        _ = dispatcher.on(.snapshot(RegistrySnapshot(sequence: 1, installations: installations)), now: t0)
        for (route, id, key) in connected {
            _ = dispatcher.on(.hello(route: route, peerKey: key, installationId: id), now: t0)
        }
        return dispatcher
    }

    @Test("placement: the shard, the dispatcher holding it, and whether the agent is connected here")
    func placement() {
        let here = "tcp://10.0.0.1:7722", there = "tcp://10.0.0.2:7722"
        var dispatcher = Self.dispatcher(
            [Self.installation("a", key: Self.keyA), Self.installation("b", key: Self.keyB)], connected: [(Self.routeA, "a", Self.keyA)])
        // With no shard map (one dispatcher), it serves every shard.
        #expect(dispatcher.placement(of: "a", advertised: here)
            == Placement(installationId: "a", shard: Shards.of("a"), servedBy: here, askedDispatcher: here, connected: true))
        #expect(dispatcher.placement(of: "b", advertised: here).connected == false)
        // With one, the holder of the shard: this dispatcher, another, or none known.
        let a = Shards.of("a"), b = Shards.of("b")
        _ = dispatcher.on(.shards(ShardMap(owned: [a], owners: b == a ? [:] : [b: there])), now: Self.t0)
        #expect(dispatcher.placement(of: "a", advertised: here).servedBy == here)
        if b != a { #expect(dispatcher.placement(of: "b", advertised: here).servedBy == there) }
        let unheld = (0..<Shards.count).first { $0 != a && $0 != b }!
        let id = (0..<10_000).map { "x\($0)" }.first { Shards.of($0) == unheld }!
        #expect(dispatcher.placement(of: id, advertised: here).servedBy == nil)
    }

    static func sends(_ actions: [DispatchAction]) -> [(Route, String)] {
        actions.compactMap { if case .send(let route, let delivery) = $0 { return (route, delivery.deliveryId) } else { return nil } }
    }

    static func errors(_ actions: [DispatchAction]) -> [ErrorCode] {
        actions.compactMap { if case .reply(_, .error(let error)) = $0 { return error.code } else { return nil } }
    }

    @Test("before the registry's snapshot a hello is told to come again, never that its installation is not registered")
    func helloBeforeTheRegistry() {
        var dispatcher = Dispatcher(settings: DispatcherSettings())
        let early = dispatcher.on(.hello(route: Self.routeA, peerKey: Self.keyA, installationId: "a"), now: Self.t0)
        #expect(Self.refusal(early.first) == .unavailable)
        #expect(dispatcher.sessionCount == 0)
        _ = dispatcher.on(.snapshot(RegistrySnapshot(sequence: 1, installations: [Self.installation("a", key: Self.keyA)])), now: Self.t0)
        let welcomed = dispatcher.on(.hello(route: Self.routeA, peerKey: Self.keyA, installationId: "a"), now: Self.t0)
        #expect(welcomed.contains(.reply(Self.routeA, .welcome(AgentWelcome(installationId: "a", pending: 0)))))
        #expect(Self.refusal(dispatcher.on(.hello(route: Self.routeB, peerKey: Self.keyB, installationId: "b"), now: Self.t0).first) == .notFound)
    }

    @Test("a hello with the bound key is welcomed; a planned delivery is recorded, then sent to that session only")
    func helloAndDeliver() {
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA), Self.installation("b", key: Self.keyB, tags: ["Sports"])])
        let hello = dispatcher.on(.hello(route: Self.routeA, peerKey: Self.keyA, installationId: "a"), now: Self.t0)
        #expect(hello.contains(.reply(Self.routeA, .welcome(AgentWelcome(installationId: "a", pending: 0)))))
        // The heartbeat hello that follows only notes the agent is there, and starts nothing new.
        #expect(dispatcher.on(.hello(route: Self.routeA, peerKey: Self.keyA, installationId: "a"), now: Self.t0).isEmpty)
        #expect(dispatcher.counters.connected == 1)
        let actions = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        guard case .record(let notification, let plans, _, _) = actions.first else {
            Issue.record("the first action records the notification")
            return
        }
        #expect(notification.notificationId == "n1")
        #expect(plans.map(\.installationId) == ["a"])
        #expect(Self.sends(actions).map(\.1) == ["n1/a/t"])
        #expect(Self.sends(actions).map(\.0) == [Self.routeA])
    }

    @Test("an impostor's hello for an installation bound to another key is refused, and the real session keeps receiving")
    func impostorRefused() {
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)])
        let impostor = dispatcher.on(.hello(route: Self.routeB, peerKey: Self.keyB, installationId: "a"), now: Self.t0)
        #expect(Self.errors(impostor) == [.forbidden])
        #expect(dispatcher.route(of: "a") == Self.routeA)
        let noKey = dispatcher.on(.hello(route: Self.routeB, peerKey: nil, installationId: "a"), now: Self.t0)
        #expect(Self.errors(noKey) == [.unauthorized])
        let unknown = dispatcher.on(.hello(route: Self.routeB, peerKey: Self.keyB, installationId: "nobody"), now: Self.t0)
        #expect(Self.errors(unknown) == [.notFound])
        let actions = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        #expect(Self.sends(actions).map(\.0) == [Self.routeA])
        // Acknowledging without a session is refused too.
        let ack = dispatcher.on(.ack(route: Self.routeB, AgentAck(deliveryIds: ["n1/a/t"])), now: Self.t0)
        #expect(Self.errors(ack) == [.unauthorized])
        #expect(dispatcher.inFlightCount == 1)
    }

    @Test("a delivery not acknowledged is sent again after resendAfter, then with backoff; an ack stops it")
    func resendAfterSilence() {
        var settings = DispatcherSettings(resendAfter: 2, silenceAfter: 1_000)
        settings.maxResendInterval = 60
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)], settings: settings)
        _ = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        #expect(Self.sends(dispatcher.on(.tick, now: Self.t0.addingTimeInterval(1.9))).isEmpty)
        #expect(Self.sends(dispatcher.on(.tick, now: Self.t0.addingTimeInterval(2))).map(\.1) == ["n1/a/t"])
        // The second resend waits twice as long.
        #expect(Self.sends(dispatcher.on(.tick, now: Self.t0.addingTimeInterval(5.9))).isEmpty)
        #expect(Self.sends(dispatcher.on(.tick, now: Self.t0.addingTimeInterval(6))).map(\.1) == ["n1/a/t"])
        #expect(dispatcher.counters.resent == 2)
        let ack = dispatcher.on(.ack(route: Self.routeA, AgentAck(deliveryIds: ["n1/a/t"])), now: Self.t0.addingTimeInterval(6.1))
        #expect(ack == [.acknowledge(installationId: "a", deliveryIds: ["n1/a/t"])])
        #expect(Self.sends(dispatcher.on(.tick, now: Self.t0.addingTimeInterval(100))).isEmpty)
        #expect(dispatcher.inFlightCount == 0)
    }

    @Test("a notification whose expression does not parse reaches no one, and says why")
    func unplanned() {
        var dispatcher = Self.dispatcher([Self.installation("i1", key: Self.keyA)])
        let broken = Self.send(1, tag: "World &&")
        let actions = dispatcher.on(.accepted([broken]), now: Self.t0)
        guard case .note(.unplanned(let id, let reason)) = actions.first else {
            Issue.record("no note: \(actions)")
            return
        }
        #expect(id == "n1" && reason.contains("World &&"))
        #expect(actions.contains(.record(broken, [], shards: nil)))
        // A notification that matches no one, but parses, is no news.
        #expect(!dispatcher.on(.accepted([Self.send(2, tag: "Nobody")]), now: Self.t0).contains { if case .note = $0 { true } else { false } })
    }

    @Test("a healthy exchange has no resends")
    func noResendsWhenAcknowledged() {
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)])
        for sequence in 1...50 {
            let actions = dispatcher.on(.accepted([Self.send(UInt64(sequence))]), now: Self.t0)
            let ids = Self.sends(actions).map(\.1)
            _ = dispatcher.on(.ack(route: Self.routeA, AgentAck(deliveryIds: ids)), now: Self.t0)
        }
        _ = dispatcher.on(.tick, now: Self.t0.addingTimeInterval(3_000))
        #expect(dispatcher.counters.resent == 0)
        #expect(dispatcher.counters.sent == 50)
        #expect(dispatcher.counters.acknowledged == 50)
    }

    @Test("a session replaced by a new connection: the old route gets nothing more, the new one loads what is pending")
    func sessionReplaced() {
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)])
        _ = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        let hello = dispatcher.on(.hello(route: Self.routeB, peerKey: Self.keyA, installationId: "a"), now: Self.t0)
        #expect(hello.contains(.note(.dropped("a", .replaced))))
        #expect(hello.contains(.load(installationId: "a", route: Self.routeB, limit: DispatcherSettings().loadLimit, catchUp: [])))
        #expect(dispatcher.route(of: "a") == Self.routeB)
        #expect(dispatcher.installation(on: Self.routeA) == nil)
        // The store answers with the unacknowledged delivery: the new session gets it and a welcome.
        let pending = AgentDelivery(
            deliveryId: "n1/a/t", notificationId: "n1", installationId: "a", template: "t", payload: "{}",
            expiresAt: Self.t0.addingTimeInterval(3_600))
        let loaded = dispatcher.on(.loaded(installationId: "a", route: Self.routeB, [pending], complete: true), now: Self.t0)
        #expect(loaded.contains(.reply(Self.routeB, .welcome(AgentWelcome(installationId: "a", pending: 1)))))
        #expect(Self.sends(loaded).map(\.0) == [Self.routeB])
        // Nothing goes to the old route, even when its resend would have come.
        let later = dispatcher.on(.tick, now: Self.t0.addingTimeInterval(10))
        #expect(Self.sends(later).allSatisfy { $0.0 == Self.routeB })
        // A load answered for a session that has gone is ignored.
        #expect(dispatcher.on(.loaded(installationId: "a", route: Self.routeA, [pending], complete: true), now: Self.t0).isEmpty)
    }

    @Test("a delivery sent to an earlier session and loaded for a new one counts as resent, not sent")
    func reloadedCountsAsResent() {
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)])
        _ = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        #expect(dispatcher.counters.sent == 1 && dispatcher.counters.resent == 0)
        // The link is cut; the agent comes back on a new connection, and the store has the delivery, sent before.
        _ = dispatcher.on(.hello(route: Self.routeB, peerKey: Self.keyA, installationId: "a"), now: Self.t0.addingTimeInterval(1))
        let pending = AgentDelivery(
            deliveryId: "n1/a/t", notificationId: "n1", installationId: "a", template: "t", payload: "{}",
            expiresAt: Self.t0.addingTimeInterval(3_600))
        let fresh = AgentDelivery(
            deliveryId: "n2/a/t", notificationId: "n2", installationId: "a", template: "t", payload: "{}",
            expiresAt: Self.t0.addingTimeInterval(3_600))
        let loaded = dispatcher.on(
            .loaded(installationId: "a", route: Self.routeB, [pending, fresh], complete: true, sentBefore: ["n1/a/t"]),
            now: Self.t0.addingTimeInterval(1))
        #expect(Self.sends(loaded).count == 2)
        #expect(dispatcher.counters.sent == 2 && dispatcher.counters.resent == 1)
    }

    @Test("a new session of the store: every session keeps its connection, forgets what is in flight, and loads again from the store")
    func storeRenewed() {
        var dispatcher = Self.dispatcher(
            [Self.installation("a", key: Self.keyA), Self.installation("b", key: Self.keyB)],
            connected: [(Self.routeA, "a", Self.keyA), (Self.routeB, "b", Self.keyB)])
        _ = dispatcher.on(.accepted([Self.send(1), Self.send(2)]), now: Self.t0)
        #expect(dispatcher.inFlightCount == 4)
        _ = dispatcher.on(.backlog(["offline"]), now: Self.t0)
        let renewed = dispatcher.on(.storeRenewed, now: Self.t0.addingTimeInterval(1))
        let limit = DispatcherSettings().loadLimit
        #expect(renewed == [.load(installationId: "a", route: Self.routeA, limit: limit, catchUp: []), .load(installationId: "b", route: Self.routeB, limit: limit, catchUp: [])])
        #expect(dispatcher.inFlightCount == 0 && dispatcher.sessionCount == 2)
        #expect(dispatcher.backlogCount == 1, "installations waiting in the store still load when their agents come")
        #expect(dispatcher.counters.storeRenewals == 1)
        // An acknowledgement of what was in flight before is passed to the store, which knows whether it still has it.
        #expect(dispatcher.on(.ack(route: Self.routeA, AgentAck(deliveryIds: ["n1/a/t"])), now: Self.t0.addingTimeInterval(1))
            == [.acknowledge(installationId: "a", deliveryIds: ["n1/a/t"])])
        // Nothing is resent from memory: what the store still holds comes back with the load, sent again once.
        #expect(Self.sends(dispatcher.on(.tick, now: Self.t0.addingTimeInterval(DispatcherSettings().resendAfter + 1))).isEmpty)
        let kept = AgentDelivery(
            deliveryId: "n2/a/t", notificationId: "n2", installationId: "a", template: "t", payload: "{}", expiresAt: Self.t0.addingTimeInterval(3_600))
        let loaded = dispatcher.on(
            .loaded(installationId: "a", route: Self.routeA, [kept], complete: true, sentBefore: ["n2/a/t"]), now: Self.t0.addingTimeInterval(7))
        #expect(Self.sends(loaded).map(\.1) == ["n2/a/t"])
        #expect(!loaded.contains { if case .reply(_, .welcome) = $0 { true } else { false } }, "a session already welcomed is not welcomed again")
        #expect(dispatcher.counters.resent == 1)
        // Planning goes on into the sessions while they load.
        let next = dispatcher.on(.accepted([Self.send(3)]), now: Self.t0.addingTimeInterval(7))
        #expect(Set(Self.sends(next).map(\.1)) == ["n3/a/t", "n3/b/t"])
    }

    @Test("after a new session of the store, sessions load again a few at a time, and one whose load fails ends until its next hello")
    func storeRenewedInTurns() {
        var settings = DispatcherSettings()
        settings.reloadsPerTick = 2
        let ids = (0..<5).map { "i\($0)" }
        let keys = ids.map { String(repeating: $0.last!, count: 40) }
        var dispatcher = Self.dispatcher(
            zip(ids, keys).map { Self.installation($0, key: $1) },
            connected: zip(ids, keys).map { (Data($0.utf8), $0, $1) }, settings: settings)
        func loads(_ actions: [DispatchAction]) -> [String] {
            actions.compactMap { if case .load(let id, _, _, _) = $0 { return id } else { return nil } }
        }
        #expect(loads(dispatcher.on(.storeRenewed, now: Self.t0)) == ["i0", "i1"])
        // i3 ends before its turn: it loads when its agent says hello again, not from the queue.
        _ = dispatcher.on(.bye(route: Data("i3".utf8), installationId: "i3"), now: Self.t0)
        #expect(loads(dispatcher.on(.tick, now: Self.t0)) == ["i2", "i4"])
        #expect(loads(dispatcher.on(.tick, now: Self.t0)).isEmpty)
        // A load the store could not answer ends the session; the next hello loads again.
        let failed = dispatcher.on(.loadFailed(installationId: "i0", route: Data("i0".utf8)), now: Self.t0)
        #expect(failed == [.position("i0", .away(after: 0)), .note(.dropped("i0", .storeUnavailable))])
        let hello = dispatcher.on(.hello(route: Data("i0".utf8), peerKey: keys[0], installationId: "i0"), now: Self.t0)
        #expect(loads(hello) == ["i0"])
        // A load answered for a session no longer loading changes nothing.
        #expect(dispatcher.on(.loadFailed(installationId: "i1", route: Data("i9".utf8)), now: Self.t0).isEmpty)
    }

    @Test("an ack for an unknown delivery is passed to the store, which records it only for this installation, and changes nothing here")
    func ackForUnknownDelivery() {
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)])
        _ = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        let actions = dispatcher.on(.ack(route: Self.routeA, AgentAck(deliveryIds: ["n9/b/t"])), now: Self.t0)
        #expect(actions == [.acknowledge(installationId: "a", deliveryIds: ["n9/b/t"])])
        #expect(dispatcher.counters.unknownAcks == 1)
        #expect(dispatcher.inFlightCount == 1)
        // Acknowledging the same delivery twice counts it once in flight.
        _ = dispatcher.on(.ack(route: Self.routeA, AgentAck(deliveryIds: ["n1/a/t"])), now: Self.t0)
        _ = dispatcher.on(.ack(route: Self.routeA, AgentAck(deliveryIds: ["n1/a/t"])), now: Self.t0)
        #expect(dispatcher.inFlightCount == 0)
        #expect(dispatcher.counters.unknownAcks == 2)
    }

    @Test("a gap in the user stream signals every connected user agent; a change signals the user's other devices only")
    func userStreamGapResyncs() {
        var dispatcher = Self.dispatcher(
            [
                Self.installation("phone", key: Self.keyA, user: "alice"), Self.installation("laptop", key: Self.keyB, user: "alice"),
                Self.installation("other", key: String(repeating: "c", count: 40)),
            ],
            connected: [(Self.routeA, "phone", Self.keyA), (Self.routeB, "laptop", Self.keyB)])
        let change = dispatcher.on(
            .userChanged(UserNotificationsChanged(userId: "alice", sequence: 7, origin: "phone")), now: Self.t0)
        #expect(change == [.reply(Self.routeB, .signal(AgentSignal(userId: "alice", sequence: 7)))])
        let gap = dispatcher.on(.userStreamGap, now: Self.t0)
        #expect(Set(gap.compactMap { if case .reply(let route, .signal) = $0 { return route } else { return nil } }) == [Self.routeA, Self.routeB])
    }

    @Test("sessions end after three agent heartbeats of silence; resends wait six, at most 30 s")
    func settingsFromHeartbeat() {
        for (heartbeat, silence, resend) in [(0.5, 2.0, 3.0), (1, 3, 6), (5, 15, 30), (30, 90, 30), (60, 180, 30)] as [(TimeInterval, TimeInterval, TimeInterval)] {
            let settings = DispatcherSettings(agentHeartbeat: heartbeat, maxAgents: 10)
            #expect(settings.silenceAfter == silence, "heartbeat \(heartbeat) s")
            #expect(settings.resendAfter == resend, "heartbeat \(heartbeat) s")
            #expect(settings.maxAgents == 10)
        }
    }

    @Test("a goodbye ends its own session at once, and what it had pending goes back to the store's backlog; one for another or without a session is refused")
    func goodbyeEndsSession() {
        var dispatcher = Self.dispatcher(
            [Self.installation("a", key: Self.keyA), Self.installation("b", key: Self.keyB)],
            connected: [(Self.routeA, "a", Self.keyA), (Self.routeB, "b", Self.keyB)])
        _ = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        #expect(dispatcher.inFlightCount == 2)
        // A goodbye naming another installation, or on a connection with no session, is refused.
        let other = dispatcher.on(.bye(route: Self.routeA, installationId: "b"), now: Self.t0)
        #expect(other.count == 1 && Self.refusal(other.first) == .forbidden)
        let stranger = dispatcher.on(.bye(route: Data("elsewhere".utf8), installationId: "a"), now: Self.t0)
        #expect(stranger.count == 1 && Self.refusal(stranger.first) == .unauthorized)
        #expect(dispatcher.sessionCount == 2)
        // It left after notification 1: what is parked later is owed to it.
        #expect(dispatcher.on(.bye(route: Self.routeA, installationId: "a"), now: Self.t0) == [.position("a", .away(after: 1)), .note(.dropped("a", .left))])
        #expect(dispatcher.sessionCount == 1)
        #expect(dispatcher.inFlightCount == 1)
        #expect(dispatcher.backlogCount == 1)
        #expect(dispatcher.counters.dropped[.left] == 1)
        // Said twice: the second finds no session.
        #expect(Self.refusal(dispatcher.on(.bye(route: Self.routeA, installationId: "a"), now: Self.t0).first) == .unauthorized)
        #expect(dispatcher.sessionCount == 1 && dispatcher.counters.dropped[.left] == 1)
    }

    @Test("an agent silent for silenceAfter is dropped; what it had pending goes back to the store's backlog")
    func silentAgentDropped() {
        var dispatcher = Self.dispatcher(
            [Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)],
            settings: DispatcherSettings(resendAfter: 100, silenceAfter: 10))
        _ = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        _ = dispatcher.on(.hello(route: Self.routeA, peerKey: Self.keyA, installationId: "a"), now: Self.t0.addingTimeInterval(8))
        #expect(!dispatcher.on(.tick, now: Self.t0.addingTimeInterval(17)).contains(.note(.dropped("a", .silent))))
        #expect(dispatcher.on(.tick, now: Self.t0.addingTimeInterval(19)).contains(.note(.dropped("a", .silent))))
        #expect(dispatcher.sessionCount == 0)
        #expect(dispatcher.inFlightCount == 0)
        #expect(dispatcher.backlogCount == 1)
        // Back again: it loads from the store.
        let hello = dispatcher.on(.hello(route: Self.routeB, peerKey: Self.keyA, installationId: "a"), now: Self.t0.addingTimeInterval(20))
        #expect(hello.contains { if case .load(installationId: "a", _, _, _) = $0 { return true } else { return false } })
    }

    @Test("a connection that is gone ends its session at once")
    func unreachable() {
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)])
        #expect(dispatcher.on(.unreachable(route: Self.routeA), now: Self.t0) == [.position("a", .away(after: 0)), .note(.dropped("a", .unreachable))])
        #expect(dispatcher.sessionCount == 0)
        // A broadcast while it is away is parked for it, not given a delivery of its own.
        let actions = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        #expect(Self.sends(actions).isEmpty)
        #expect(actions.contains(.record(Self.send(1), [], shards: nil, parked: ParkedCounts(counts: [Shards.of("a"): 1], registryAt: 1))))
        #expect(dispatcher.backlogCount == 0 && dispatcher.counters.parked == 1)
    }

    @Test("at most `window` deliveries are in flight per session; each ack lets the next one go")
    func window() {
        var settings = DispatcherSettings()
        settings.window = 2
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)], settings: settings)
        let first = dispatcher.on(.accepted((1...5).map { Self.send(UInt64($0)) }), now: Self.t0)
        #expect(Self.sends(first).map(\.1) == ["n1/a/t", "n2/a/t"])
        let next = dispatcher.on(.ack(route: Self.routeA, AgentAck(deliveryIds: ["n1/a/t"])), now: Self.t0)
        #expect(Self.sends(next).map(\.1) == ["n3/a/t"])
    }

    @Test("an installation deleted or bound to another key loses its session")
    func rebindEndsSession() {
        var dispatcher = Self.dispatcher([Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)])
        let rebound = Self.installation("a", key: Self.keyB)
        let actions = dispatcher.on(
            .installationChanged(InstallationChanged(change: .upserted, installationId: "a", installation: rebound)), now: Self.t0)
        #expect(Self.errors(actions) == [.forbidden])
        #expect(actions.contains(.note(.dropped("a", .unbound))))
        #expect(dispatcher.sessionCount == 0)
    }

    @Test("a broadcast to many sessions sends one delivery to each")
    func broadcast() {
        let count = 2_000
        let installations = (0..<count).map { Self.installation("i\($0)", key: "k\($0)") }
        var dispatcher = Self.dispatcher(installations, connected: (0..<count).map { (Data("r\($0)".utf8), "i\($0)", "k\($0)") })
        #expect(dispatcher.sessionCount == count)
        let actions = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        let routes = Self.sends(actions).map(\.0)
        #expect(routes.count == count)
        #expect(Set(routes).count == count)
        for (route, id) in Self.sends(actions) {
            _ = dispatcher.on(.ack(route: route, AgentAck(deliveryIds: [id])), now: Self.t0)
        }
        #expect(dispatcher.inFlightCount == 0)
        #expect(dispatcher.counters.acknowledged == count)
    }

    @Test("at most maxInFlight deliveries are out across sessions; an ack gives the room to a session that waited")
    func globalInFlightCap() {
        var settings = DispatcherSettings()
        settings.maxInFlight = 3
        var dispatcher = Self.dispatcher(
            [Self.installation("a", key: Self.keyA), Self.installation("b", key: Self.keyB)],
            connected: [(Self.routeA, "a", Self.keyA), (Self.routeB, "b", Self.keyB)], settings: settings)
        let first = dispatcher.on(.accepted([Self.send(1), Self.send(2)]), now: Self.t0)
        #expect(Self.sends(first).count == 3)
        #expect(dispatcher.inFlightCount == 3)
        let (route, id) = Self.sends(first)[0]
        let next = dispatcher.on(.ack(route: route, AgentAck(deliveryIds: [id])), now: Self.t0)
        #expect(Self.sends(next).count == 1)
        #expect(Set(Self.sends(first).map(\.1) + Self.sends(next).map(\.1)) == ["n1/a/t", "n2/a/t", "n1/b/t", "n2/b/t"])
    }

    @Test("an agent slow to acknowledge gets a longer resend time, learned from its acknowledgements")
    func resendTimeAdapts() {
        var dispatcher = Self.dispatcher(
            [Self.installation("a", key: Self.keyA)], connected: [(Self.routeA, "a", Self.keyA)],
            settings: DispatcherSettings(resendAfter: 2, silenceAfter: 1_000))
        _ = dispatcher.on(.accepted([Self.send(1)]), now: Self.t0)
        // Acknowledged after 10 s (the resend at 2 s went out meanwhile, so this sample does not count)…
        _ = dispatcher.on(.tick, now: Self.t0.addingTimeInterval(2))
        _ = dispatcher.on(.ack(route: Self.routeA, AgentAck(deliveryIds: ["n1/a/t"])), now: Self.t0.addingTimeInterval(10))
        // …and a delivery sent once and acknowledged after 10 s does count.
        let t1 = Self.t0.addingTimeInterval(20)
        _ = dispatcher.on(.accepted([Self.send(2)]), now: t1)
        _ = dispatcher.on(.ack(route: Self.routeA, AgentAck(deliveryIds: ["n2/a/t"])), now: t1.addingTimeInterval(10))
        let t2 = Self.t0.addingTimeInterval(40)
        _ = dispatcher.on(.accepted([Self.send(3)]), now: t2)
        #expect(Self.sends(dispatcher.on(.tick, now: t2.addingTimeInterval(5))).isEmpty, "not resent after resendAfter: the agent takes 10 s")
        #expect(Self.sends(dispatcher.on(.tick, now: t2.addingTimeInterval(31))).map(\.1) == ["n3/a/t"])
    }

    @Test("beyond limits.agents a new hello is refused with unavailable; a reconnect of a connected agent still gets in")
    func agentLimit() {
        var settings = DispatcherSettings()
        settings.maxAgents = 1
        var dispatcher = Self.dispatcher(
            [Self.installation("a", key: Self.keyA), Self.installation("b", key: Self.keyB)], connected: [(Self.routeA, "a", Self.keyA)],
            settings: settings)
        #expect(dispatcher.sessionCount == 1)
        #expect(Self.errors(dispatcher.on(.hello(route: Self.routeB, peerKey: Self.keyB, installationId: "b"), now: Self.t0)) == [.unavailable])
        #expect(dispatcher.sessionCount == 1)
        // The same device on a new connection replaces its session, within the limit.
        let routeA2 = Data("route-a2".utf8)
        #expect(Self.errors(dispatcher.on(.hello(route: routeA2, peerKey: Self.keyA, installationId: "a"), now: Self.t0)).isEmpty)
        #expect(dispatcher.sessionCount == 1)
    }
}

/// Deliveries to phones and browsers leave the core as `.push` actions, for the push services.
@Suite("Dispatcher push platforms")
struct DispatcherPushTests {
    static func phone(_ id: String, platform: String, channel: String) -> Installation {
        var installation = Installation(
            installationId: id, pushChannel: channel, tags: ["World"],
            templates: ["t": InstallationTemplate(body: #"{"aps":{"alert":"$(m)"}}"#, headers: ["APNS-Collapse-Id": "scores"])])
        installation.platform = platform
        return installation
    }

    static func pushes(_ actions: [DispatchAction]) -> [PlannedDelivery] {
        actions.compactMap { if case .push(let plan, _) = $0 { return plan } else { return nil } }
    }

    @Test("a platform with a push service gets a push action with its channel and headers; one without fails as PnsUnavailable")
    func pushOrUnavailable() {
        let installations = [
            Self.phone("iphone", platform: "apns", channel: "ab12"),
            Self.phone("android", platform: "fcmv1", channel: "fcm-token"),
            DispatcherTests.installation("desk", key: DispatcherTests.keyA),
        ]
        var settings = DispatcherSettings()
        settings.platforms = ["linux", "apns"]
        var dispatcher = DispatcherTests.dispatcher(installations, connected: [(DispatcherTests.routeA, "desk", DispatcherTests.keyA)], settings: settings)
        let actions = dispatcher.on(.accepted([DispatcherTests.send(1)]), now: DispatcherTests.t0)
        guard case .record(_, let plans, _, _) = actions.first else {
            Issue.record("the first action records the notification")
            return
        }
        #expect(plans.first { $0.installationId == "android" }?.unreachable == "PnsUnavailable")
        #expect(plans.first { $0.installationId == "iphone" }?.unreachable == nil)
        let pushed = Self.pushes(actions)
        #expect(pushed.map(\.installationId) == ["iphone"])
        #expect(pushed.first?.pushChannel == "ab12")
        #expect(pushed.first?.payload == #"{"aps":{"alert":"hello 1"}}"#)
        #expect(pushed.first?.headers == ["apns-collapse-id": "scores"])
        #expect(DispatcherTests.sends(actions).map(\.1) == ["n1/desk/t"])

        // When FCM's credentials are set, its installations are pushed to as well.
        dispatcher.setPlatforms(["apns", "fcmv1"])
        let next = dispatcher.on(.accepted([DispatcherTests.send(2)]), now: DispatcherTests.t0)
        #expect(Set(Self.pushes(next).map(\.installationId)) == ["iphone", "android"])
        #expect(DispatcherTests.sends(next).map(\.1) == ["n2/desk/t"], "Linux agents are always delivered to")
    }
}

@Suite("FIFO")
struct FIFOTests {
    @Test("takes in order across compactions, and gives back what is left")
    func order() {
        var queue = FIFO<Int>()
        var taken: [Int] = []
        for i in 0..<10_000 {
            queue.append(i)
            if i % 3 == 0, let first = queue.popFirst() { taken.append(first) }
        }
        #expect(queue.count == 10_000 - taken.count)
        while queue.count > 100, let first = queue.popFirst() { taken.append(first) }
        let rest = queue.removeAll()
        #expect(taken + rest == Array(0..<10_000))
        #expect(queue.isEmpty && queue.popFirst() == nil)
    }
}

/// Several dispatchers sharing the agents: each serves the installations of its shards.
@Suite("Dispatcher shards")
struct DispatcherShardTests {
    /// Installation ids, one per shard asked for, found by trying names.
    static func ids(inShards wanted: [Int]) -> [String] {
        wanted.map { shard in (0...).lazy.map { "dev-\($0)" }.first { Shards.of($0) == shard }! }
    }

    @Test("the shard of an id is stable and spread; the fair share rounds up")
    func shardFunction() {
        #expect(Shards.of("linux-1") == Shards.of("linux-1"))
        var counts = [Int](repeating: 0, count: Shards.count)
        for i in 0..<6_400 { counts[Shards.of("installation-\(i)")] += 1 }
        #expect(counts.allSatisfy { $0 > 50 && $0 < 150 }, "\(counts)")
        #expect(Shards.fairShare(dispatchers: 1) == 64 && Shards.fairShare(dispatchers: 2) == 32 && Shards.fairShare(dispatchers: 3) == 22)
    }

    @Test("a hello for another dispatcher's shard is redirected to it, or refused as unavailable while it has no owner")
    func helloRedirect() {
        let ids = Self.ids(inShards: [1, 2, 3])
        var dispatcher = DispatcherTests.dispatcher(ids.map { DispatcherTests.installation($0, key: DispatcherTests.keyA) })
        _ = dispatcher.on(.shards(ShardMap(owned: [1], owners: [2: "tcp://10.0.0.2:7722"])), now: DispatcherTests.t0)
        let mine = dispatcher.on(.hello(route: DispatcherTests.routeA, peerKey: DispatcherTests.keyA, installationId: ids[0]), now: DispatcherTests.t0)
        #expect(mine.contains(.reply(DispatcherTests.routeA, .welcome(AgentWelcome(installationId: ids[0], pending: 0)))))
        let other = dispatcher.on(.hello(route: DispatcherTests.routeB, peerKey: DispatcherTests.keyA, installationId: ids[1]), now: DispatcherTests.t0)
        #expect(other == [.reply(DispatcherTests.routeB, .redirect(AgentRedirect(installationId: ids[1], endpoint: "tcp://10.0.0.2:7722")))])
        let vacant = dispatcher.on(.hello(route: DispatcherTests.routeB, peerKey: DispatcherTests.keyA, installationId: ids[2]), now: DispatcherTests.t0)
        #expect(DispatcherTests.errors(vacant) == [.unavailable])
        #expect(dispatcher.sessionCount == 1 && dispatcher.counters.redirected == 1)
    }

    @Test("only the shards held here are planned, each once per notification, from its own cursor")
    func planning() {
        let ids = Self.ids(inShards: [4, 5, 6])
        var dispatcher = DispatcherTests.dispatcher(ids.map { DispatcherTests.installation($0, key: DispatcherTests.keyA) }, settings: DispatcherTests.perDevice)
        // Shard 5 was planned up to notification 2 by its previous owner.
        _ = dispatcher.on(.shards(ShardMap(owned: [4, 5], cursors: [4: 0, 5: 2])), now: DispatcherTests.t0)
        func planned(_ sequence: UInt64) -> [String] {
            let actions = dispatcher.on(.accepted([DispatcherTests.send(sequence)]), now: DispatcherTests.t0)
            guard case .record(_, let plans, _, _)? = actions.first else { return [] }
            return plans.map(\.installationId).sorted()
        }
        #expect(planned(1) == [ids[0]])
        #expect(planned(2) == [ids[0]])
        #expect(planned(3) == [ids[0], ids[1]].sorted())
        // The same notification again (a pull repeated after a restart) plans nothing twice.
        #expect(planned(3) == [])
        #expect(dispatcher.shards?.cursors == [4: 3, 5: 3])
    }

    @Test("a shard taken over while a pull was under way is not planned from that pull: it waits for a pull from its own cursor")
    func takeoverDuringPull() {
        let ids = Self.ids(inShards: [4, 5])
        var dispatcher = DispatcherTests.dispatcher(ids.map { DispatcherTests.installation($0, key: DispatcherTests.keyA) }, settings: DispatcherTests.perDevice)
        // Shard 4 is planned up to 14 here; a pull after 14 is under way when shard 5, planned up
        // to 10 by its previous owner, is taken over.
        _ = dispatcher.on(.shards(ShardMap(owned: [4], cursors: [4: 14])), now: DispatcherTests.t0)
        _ = dispatcher.on(.shards(ShardMap(owned: [4, 5], cursors: [4: 14, 5: 10])), now: DispatcherTests.t0)
        let late = dispatcher.on(.accepted([DispatcherTests.send(15)], after: 14), now: DispatcherTests.t0)
        guard case .record(_, let plans, let shards, _)? = late.first else {
            Issue.record("the pull records what it planned")
            return
        }
        #expect(plans.map(\.installationId) == [ids[0]])
        // Only shard 4's cursor moves; shard 5's stays, so the next pull starts there.
        #expect(shards == [4])
        #expect(dispatcher.shards?.cursors == [4: 15, 5: 10])
        // The pull from shard 5's cursor plans 11 to 15 for it, and nothing twice for shard 4.
        let catchUp = dispatcher.on(.accepted((11...15).map { DispatcherTests.send(UInt64($0)) }, after: 10), now: DispatcherTests.t0)
        let records = catchUp.compactMap { action -> (UInt64, [String], Set<Int>?)? in
            guard case .record(let notification, let plans, let shards, _) = action else { return nil }
            return (notification.sequence, plans.map(\.installationId), shards)
        }
        #expect(records.map(\.0) == [11, 12, 13, 14, 15])
        #expect(records.allSatisfy { $0.1 == [ids[1]] && $0.2 == [5] })
        #expect(dispatcher.shards?.cursors == [4: 15, 5: 15])
    }

    @Test("a shard lost moves its sessions to the new owner")
    func shardLost() {
        let ids = Self.ids(inShards: [7, 8])
        var dispatcher = DispatcherTests.dispatcher(
            ids.map { DispatcherTests.installation($0, key: DispatcherTests.keyA) },
            connected: [(DispatcherTests.routeA, ids[0], DispatcherTests.keyA), (DispatcherTests.routeB, ids[1], DispatcherTests.keyA)])
        #expect(dispatcher.sessionCount == 2)
        let actions = dispatcher.on(.shards(ShardMap(owned: [8], owners: [7: "tcp://10.0.0.3:7722"])), now: DispatcherTests.t0)
        #expect(actions.contains(.reply(DispatcherTests.routeA, .redirect(AgentRedirect(installationId: ids[0], endpoint: "tcp://10.0.0.3:7722")))))
        #expect(actions.contains(.note(.dropped(ids[0], .moved))))
        #expect(dispatcher.sessionCount == 1 && dispatcher.route(of: ids[1]) == DispatcherTests.routeB)
    }

    @Test("leases read again keep a shard's planned cursor where it is ahead of the store's, unless the shard was just taken")
    func cursorsKept() {
        let planned: [Int: UInt64] = [1: 20, 2: 5, 3: 30]
        let stored: [Int: UInt64] = [1: 12, 2: 9, 3: 11, 4: 7]
        // 1 is held on with turns not written yet; 2's store is ahead (never so while held, but
        // never gone back); 3 was lost and taken again at a new epoch; 4 is new here.
        #expect(ShardMap.keeping(planned, over: stored, except: [3, 4]) == [1: 20, 2: 9, 3: 11, 4: 7])
        // A shard no longer held is not brought back by what was planned for it.
        #expect(ShardMap.keeping(planned, over: [1: 12], except: []) == [1: 20])
    }
}

@Suite("Lease plan")
struct LeasePlanTests {
    @Test("a dispatcher claims up to its fair share and gives back its highest shards above it")
    func fairShare() {
        #expect(LeasePlan.decide(owned: [], liveDispatchers: 1) == .init(claim: 64, release: []))
        #expect(LeasePlan.decide(owned: [], liveDispatchers: 2) == .init(claim: 32, release: []))
        let all = Set(0..<64)
        #expect(LeasePlan.decide(owned: all, liveDispatchers: 2) == .init(claim: 0, release: Set(32..<64)))
        #expect(LeasePlan.decide(owned: Set(0..<32), liveDispatchers: 2) == .init(claim: 0, release: []))
        // The other dispatcher died: the survivor claims the rest.
        #expect(LeasePlan.decide(owned: Set(0..<32), liveDispatchers: 1) == .init(claim: 32, release: []))
        #expect(LeasePlan.decide(owned: Set(0..<22), liveDispatchers: 3) == .init(claim: 0, release: []))
    }

    @Test("leases are served only until a margin before they run out")
    func holding() {
        let t0 = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(LeasePlan.holds(renewedAt: t0, now: t0.addingTimeInterval(3.9), period: 6, margin: 2))
        #expect(!LeasePlan.holds(renewedAt: t0, now: t0.addingTimeInterval(4), period: 6, margin: 2))
    }
}
