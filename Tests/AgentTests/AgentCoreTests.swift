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

    @Test("a signal asks for a sync; a refused hello is logged and tried again after a wait that doubles up to a heartbeat")
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
        // The last hello went at 1 s; eleven refusals later the wait is a heartbeat (5 s), no more.
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(5.9)) == [])
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(6)) == [.hello], "never longer than a heartbeat")
        let other = core.on(.received(.error(ErrorReply(code: .malformedFrames, message: "x")), seen: false), now: Self.t0)
        #expect(other == [.log("x", code: .malformedFrames)])
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

    @Test("a redirect to a dispatcher that never answers is left after three heartbeats for the next one")
    func redirectToDeadDispatcher() {
        var core = AgentCore(settings: AgentCore.Settings(heartbeat: 5, helloRetry: 0.5))
        _ = core.on(.connected, now: Self.t0)
        // Named by a peer whose lease map is a moment old, the dispatcher has just died: no
        // connection ever comes, and no disconnection either.
        _ = core.on(.received(.redirect(AgentRedirect(installationId: "me", endpoint: "tcp://10.0.0.2:7722")), seen: false), now: Self.t0)
        #expect(!core.on(.tick, now: Self.t0.addingTimeInterval(14)).contains(.tryNextDispatcher))
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(15.5)).contains(.tryNextDispatcher))
    }

    @Test("a redirect moves the agent to the dispatcher that serves it; three heartbeats without a connection try the next one")
    func redirectsAndFailover() {
        var core = AgentCore(settings: AgentCore.Settings(heartbeat: 5, helloRetry: 0.5))
        _ = core.on(.connected, now: Self.t0)
        let moved = core.on(.received(.redirect(AgentRedirect(installationId: "me", endpoint: "tcp://10.0.0.2:7722")), seen: false), now: Self.t0)
        #expect(moved == [.moveTo("tcp://10.0.0.2:7722")])
        #expect(!core.welcomed)
        // Connected and quiet (libzmq's heartbeats keep the connection): no move, only hellos.
        _ = core.on(.connected, now: Self.t0.addingTimeInterval(1))
        _ = core.on(.received(.welcome(AgentWelcome(installationId: "me", pending: 0)), seen: false), now: Self.t0.addingTimeInterval(1))
        #expect(!core.on(.tick, now: Self.t0.addingTimeInterval(60)).contains(.tryNextDispatcher))
        // The connection goes and does not come back for three heartbeats: the next dispatcher, then again three heartbeats later.
        _ = core.on(.disconnected, now: Self.t0.addingTimeInterval(61))
        #expect(!core.on(.tick, now: Self.t0.addingTimeInterval(75)).contains(.tryNextDispatcher))
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(76.5)).contains(.tryNextDispatcher))
        #expect(!core.on(.tick, now: Self.t0.addingTimeInterval(80)).contains(.tryNextDispatcher))
        #expect(core.on(.tick, now: Self.t0.addingTimeInterval(92)).contains(.tryNextDispatcher))
        // A connection made in time stops it.
        _ = core.on(.connected, now: Self.t0.addingTimeInterval(93))
        #expect(!core.on(.tick, now: Self.t0.addingTimeInterval(120)).contains(.tryNextDispatcher))
        // A hello refused because no dispatcher holds the shard yet is tried again after a wait.
        let refused = core.on(.received(.error(ErrorReply(code: .unavailable, message: "no dispatcher serves shard 3 yet")), seen: false),
                              now: Self.t0.addingTimeInterval(121))
        #expect(refused == [.log("no dispatcher serves shard 3 yet", code: .unavailable)] && core.refused)
    }
}
