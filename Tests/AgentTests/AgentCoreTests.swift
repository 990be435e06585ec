import Foundation
import HubProtocol
import Testing

@testable import NHAgent

/// The agent's decisions on its channel, with no socket, store or clock.
@Suite("Agent state machine")
struct AgentCoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    static func delivery(_ id: String, rich: Bool = false) -> AgentDelivery {
        AgentDelivery(
            deliveryId: id, notificationId: "n", installationId: "me", payload: "{}", expiresAt: t0.addingTimeInterval(60),
            rich: rich ? RichReference(richId: "abc", richType: "image", message: "m", contentType: "image/png", size: 3) : nil,
            richTicket: rich ? "ticket" : nil)
    }

    @Test("hello at connect, again quickly until welcomed, then once a heartbeat")
    func helloSchedule() {
        var core = AgentCore(settings: AgentCore.Settings(heartbeat: 5, helloRetry: 0.5))
        #expect(core.on(.connected, now: Self.t0) == [.hello])
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(0.4)) == [])
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(0.5)) == [.hello])
        _ = core.on(.received(.welcome(AgentWelcome(installationId: "me", pending: 0)), seen: false), now: Self.t0)
        #expect(core.welcomed)
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(4)) == [])
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(5.5)) == [.hello])
        // A reconnect starts over.
        #expect(core.on(.connected, now: Self.t0.addingTimeInterval(6)) == [.hello])
        #expect(!core.welcomed)
    }

    @Test("a new delivery is shown and acknowledged; one seen before is only acknowledged")
    func dedupe() {
        var core = AgentCore()
        let fresh = Self.delivery("d1")
        #expect(core.on(.received(.deliver(fresh), seen: false), now: Self.t0) == [.show(fresh), .acknowledge("d1")])
        #expect(core.welcomed, "a delivery shows the session is there")
        #expect(core.on(.received(.deliver(fresh), seen: true), now: Self.t0) == [.acknowledge("d1")])
    }

    @Test("a rich delivery is held for its fetch, not shown or acknowledged yet")
    func richHeld() {
        var core = AgentCore()
        let rich = Self.delivery("r1", rich: true)
        #expect(core.on(.received(.deliver(rich), seen: false), now: Self.t0) == [.holdForFetch(rich)])
    }

    @Test("a signal asks for a sync; a refused hello is logged and tried again after a wait that doubles up to 5 s")
    func signalsAndRefusals() {
        var core = AgentCore()
        #expect(core.on(.received(.signal(AgentSignal(userId: "u", sequence: 9)), seen: false), now: Self.t0) == [.syncUser(sequence: 9)])
        let refused = core.on(.received(.error(ErrorReply(code: .forbidden, message: "bound to another key")), seen: false), now: Self.t0)
        #expect(refused == [.log("bound to another key", code: .forbidden)])
        #expect(core.refused)
        _ = core.on(.tick, now: Self.t0)
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(0.9)) == [])
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(1)) == [.hello])
        for _ in 0..<10 {
            _ = core.on(.received(.error(ErrorReply(code: .notFound, message: "not yet")), seen: false), now: Self.t0)
        }
        // The last hello went at 1 s; eleven refusals later the wait is 5 s, no more, though a
        // heartbeat is 30 s.
        #expect(core.settings.heartbeat == 30)
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(5.9)) == [])
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(6)) == [.hello], "never longer than 5 s")
        let other = core.on(.received(.error(ErrorReply(code: .malformedFrames, message: "x")), seen: false), now: Self.t0)
        #expect(other == [.log("x", code: .malformedFrames)])
    }

    @Test("a registration taken, or a pause of the host, brings a hello at once; a welcomed agent's registration does not")
    func helloAfterRegistrationAndPause() {
        var core = AgentCore(settings: AgentCore.Settings(heartbeat: 30, helloRetry: 0.5))
        // Before the first connection or tick, nothing is said.
        #expect(core.on(.registered, now: Self.t0) == [])
        #expect(core.on(.resumed, now: Self.t0) == [])
        #expect(core.on(.connected, now: Self.t0) == [.hello])
        for _ in 0..<6 { _ = core.on(.received(.error(ErrorReply(code: .notFound, message: "not registered")), seen: false), now: Self.t0) }
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(1)) == [], "a refused hello waits")
        #expect(core.on(.registered, now: Self.t0.addingTimeInterval(1)) == [.hello], "registered: hello at once")
        // Refused again (the dispatcher had not heard of it yet): the wait starts over at 0.5 s.
        _ = core.on(.received(.error(ErrorReply(code: .notFound, message: "not yet")), seen: false), now: Self.t0.addingTimeInterval(1))
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(1.9)) == [])
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(2)) == [.hello])
        _ = core.on(.received(.welcome(AgentWelcome(installationId: "me", pending: 0)), seen: false), now: Self.t0.addingTimeInterval(1))
        #expect(core.connected)
        #expect(core.on(.registered, now: Self.t0.addingTimeInterval(2)) == [], "already welcomed: categories changed, nothing to say")
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(30)) == [])
        // After a pause the session may have ended: hello at once, and the heartbeat counts from there.
        #expect(core.on(.resumed, now: Self.t0.addingTimeInterval(200)) == [.hello])
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(229)) == [])
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(230)) == [.hello])
    }

    @Test("rich fetches back off from half a second to 30 s, and give up after the last try or at expiry")
    func richRetrySchedule() {
        let later = Self.t0.addingTimeInterval(3_600)
        #expect(AgentCore.richRetry(attempts: 1, maxAttempts: 8, expiresAt: later, now: Self.t0) == .retry(after: 0.5))
        #expect(AgentCore.richRetry(attempts: 2, maxAttempts: 8, expiresAt: later, now: Self.t0) == .retry(after: 1))
        #expect(AgentCore.richRetry(attempts: 7, maxAttempts: 8, expiresAt: later, now: Self.t0) == .retry(after: 30))
        #expect(AgentCore.richRetry(attempts: 8, maxAttempts: 8, expiresAt: later, now: Self.t0) == .giveUp)
        #expect(AgentCore.richRetry(attempts: 1, maxAttempts: 8, expiresAt: Self.t0, now: Self.t0) == .giveUp)
    }

    static let a = "tcp://10.0.0.1:7722", b = "tcp://10.0.0.2:7722", c = "tcp://10.0.0.3:7722"
    static let settings = AgentCore.Settings(heartbeat: 5, helloRetry: 0.5, leasePeriod: 3)

    func moves(_ actions: [AgentCore.Action]) -> [String] {
        actions.compactMap { if case .moveTo(let endpoint) = $0 { return endpoint } else { return nil } }
    }

    @Test("a redirect to a dispatcher that never answers is left after a lease period for the next one")
    func redirectToDeadDispatcher() {
        var core = AgentCore(settings: Self.settings, dispatchers: [Self.a, Self.b])
        _ = core.on(.connected, now: Self.t0)
        // Named by a peer whose lease map is a moment old, the dispatcher has just died: no
        // connection ever comes, and no disconnection either.
        #expect(moves(core.on(.received(.redirect(AgentRedirect(installationId: "me", endpoint: Self.c)), seen: false), now: Self.t0)) == [Self.c])
        #expect(moves(core.on(.tick, now: Self.t0.addingTimeInterval(2.9))) == [])
        #expect(moves(core.on(.tick, now: Self.t0.addingTimeInterval(3.1))) == [Self.a])
        #expect(core.current == Self.a)
    }

    @Test("a dispatcher that closes the connection is left at once; a redirect back to it within a lease period is not followed")
    func redirectsAndFailover() {
        var core = AgentCore(settings: Self.settings, dispatchers: [Self.a, Self.b])
        _ = core.on(.connected, now: Self.t0)
        _ = core.on(.received(.welcome(AgentWelcome(installationId: "me", pending: 0)), seen: false), now: Self.t0)
        // Connected and quiet (the transport's heartbeats keep the connection): no move, only hellos.
        #expect(moves(core.on(.tick, now: Self.t0.addingTimeInterval(60))) == [])
        // A dies: the connection closes, and the agent goes to B at once, not three heartbeats later.
        #expect(moves(core.on(.disconnected, now: Self.t0.addingTimeInterval(61))) == [Self.b])
        _ = core.on(.connected, now: Self.t0.addingTimeInterval(61.05))
        // B does not hold the shard until A's lease runs out, and names A: the agent stays and asks again.
        let named = core.on(.received(.redirect(AgentRedirect(installationId: "me", endpoint: Self.a)), seen: false),
                            now: Self.t0.addingTimeInterval(61.1))
        #expect(named == [] && core.current == Self.b && !core.welcomed)
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(61.7)).contains(.hello))
        // B holds it now, and welcomes the agent.
        _ = core.on(.received(.welcome(AgentWelcome(installationId: "me", pending: 0)), seen: false), now: Self.t0.addingTimeInterval(64.2))
        #expect(core.welcomed && core.current == Self.b)
        // A redirect after the lease period is followed: A came back and holds the shard again.
        #expect(moves(core.on(.received(.redirect(AgentRedirect(installationId: "me", endpoint: Self.a)), seen: false),
                              now: Self.t0.addingTimeInterval(70))) == [Self.a])
    }

    @Test("refused connections are tried in turn, no faster than a hello retry; one dispatcher is never left")
    func refusals() {
        var core = AgentCore(settings: Self.settings, dispatchers: [Self.a, Self.b])
        #expect(moves(core.on(.refused, now: Self.t0)) == [Self.b])
        #expect(moves(core.on(.refused, now: Self.t0.addingTimeInterval(0.1))) == [])
        #expect(moves(core.on(.tick, now: Self.t0.addingTimeInterval(0.3))) == [])
        #expect(moves(core.on(.tick, now: Self.t0.addingTimeInterval(0.6))) == [Self.a])
        _ = core.on(.connected, now: Self.t0.addingTimeInterval(0.7))
        #expect(moves(core.on(.tick, now: Self.t0.addingTimeInterval(30))) == [])

        var alone = AgentCore(settings: Self.settings, dispatchers: [Self.a])
        #expect(moves(alone.on(.refused, now: Self.t0)) == [])
        #expect(moves(alone.on(.disconnected, now: Self.t0.addingTimeInterval(1))) == [])
        #expect(moves(alone.on(.tick, now: Self.t0.addingTimeInterval(10))) == [] && alone.current == Self.a)
    }

    @Test("a refused hello is tried again after a wait")
    func refusedHello() {
        var core = AgentCore(settings: Self.settings, dispatchers: [Self.a, Self.b])
        _ = core.on(.connected, now: Self.t0)
        // A hello refused because no dispatcher holds the shard yet is tried again after a wait.
        let refused = core.on(.received(.error(ErrorReply(code: .unavailable, message: "no dispatcher serves shard 3 yet")), seen: false),
                              now: Self.t0.addingTimeInterval(1))
        #expect(refused == [.log("no dispatcher serves shard 3 yet", code: .unavailable)] && core.refused)
    }
}
