import Foundation
import HubProtocol

/// The agent's decisions on its channel, with no IO: when to say hello, what to do with each
/// message from the dispatcher (show once, acknowledge, hold a rich one for its fetch, sync the
/// user's notifications, register again), which dispatcher to be connected to, and when to try a
/// failed rich fetch again. `AgentDaemon` feeds it events and carries out the actions, in order.
///
/// With several dispatchers (`dispatch.agents`), a dispatcher that closes the connection, refuses
/// it, or leaves a transport heartbeat unanswered for a lease period is left at once for the next
/// one (a ping goes every lease period, so that is within two). A redirect back to one that failed
/// within a lease period is not followed: its lease has not run out yet, so the dispatcher asked
/// still names it; the agent stays and says hello again until that dispatcher holds the shard.
struct AgentCore {
    struct Settings: Equatable {
        /// Seconds between hellos once welcomed: the heartbeat.
        var heartbeat: TimeInterval = 30
        /// Seconds between hellos until a welcome comes, and at least between two moves.
        var helloRetry: TimeInterval = 0.5
        /// The longest wait before a refused hello is tried again (or a heartbeat, if shorter): a
        /// dispatcher loading its index, or a shard between owners, is soon ready.
        var longestRetry: TimeInterval = 5
        /// How long a dispatcher's lease on its shards lasts (three of the services' heartbeats, at
        /// least 3 s): after that long without a connection the next dispatcher is tried, and for
        /// that long a dispatcher that failed is not gone back to.
        var leasePeriod: TimeInterval = 3
    }

    enum Event: Equatable {
        /// The channel's handshake completed, on first connect or after a reconnect.
        case connected
        /// The channel's connection closed (the dispatcher went, or its heartbeats stopped).
        case disconnected
        /// A connection attempt to the current dispatcher failed: nothing listens there.
        case refused
        /// A message from the dispatcher. `seen`: the delivery was shown before (only for deliveries).
        case received(AgentFrame, seen: Bool)
        /// The registry took the installation: a hello it refused may be welcomed now.
        case registered
        /// The agent ran again after a pause (the host slept, or the process was stopped), long
        /// enough for the dispatcher to have ended a silent session.
        case resumed
        case tick
    }

    enum Action: Equatable {
        case hello
        /// Note the delivery as shown, then show it; a note that finds it already there skips the showing.
        case show(AgentDelivery)
        case acknowledge(String)
        /// Keep a silent rich delivery until its payload is fetched; only then is it shown.
        case holdForFetch(AgentDelivery)
        /// A push message for an app registered with the agent: hand it to the app, and acknowledge
        /// it only once the app has it (or the agent keeps it for an app that cannot be reached).
        case handToApp(AgentDelivery, AppPushMessage)
        /// The user's notifications changed past what this agent has.
        case syncUser(sequence: UInt64)
        case log(String, code: ErrorCode)
        /// Connect to this dispatcher instead: the one that serves this installation, or the next
        /// one configured when the current one failed.
        case moveTo(String)
    }

    let settings: Settings
    /// The dispatchers configured, in order, and the one the channel is connected to.
    let dispatchers: [String]
    private(set) var current: String
    /// When each dispatcher last closed or refused a connection, or went unanswered.
    private var failedAt: [String: Date] = [:]
    /// The current dispatcher failed since the agent moved to it.
    private var currentFailed = false
    private var lastMove: Date?
    private(set) var welcomed = false
    /// Hellos refused in a row: each doubles the wait before the next, up to `longestRetry`.
    private(set) var refusals = 0
    var refused: Bool { refusals > 0 }
    private var lastHello: Date?
    /// Since when the channel has had no connection; nil while it has one.
    private var unconnectedSince: Date?
    private var started = false
    /// The channel has a connection: its handshake completed and it has not closed since.
    var connected: Bool { started && unconnectedSince == nil }

    init(settings: Settings = Settings(), dispatchers: [String] = ["tcp://127.0.0.1:7722"]) {
        precondition(!dispatchers.isEmpty, "an agent needs a dispatcher")
        self.settings = settings
        self.dispatchers = dispatchers
        current = dispatchers[0]
    }

    mutating func on(_ event: Event, now: Date) -> [Action] {
        switch event {
        case .connected:
            welcomed = false
            started = true
            unconnectedSince = nil
            currentFailed = false
            return hello(now)
        case .disconnected, .refused:
            welcomed = false
            unconnectedSince = unconnectedSince ?? now
            failedAt[current] = now
            currentFailed = true
            return leave(now)
        case .tick:
            if !started {
                started = true
                unconnectedSince = now
            }
            // A failed dispatcher is left as soon as a move is allowed.
            if currentFailed {
                let moved = leave(now)
                if !moved.isEmpty { return moved }
            }
            // No connection for a lease period: that dispatcher is gone or cannot be reached (a
            // host that does not answer), and another may serve this installation.
            if let since = unconnectedSince, now.timeIntervalSince(since) > settings.leasePeriod {
                unconnectedSince = now
                failedAt[current] = now
                let moved = next(now)
                if !moved.isEmpty { return moved }
            }
            let interval = welcomed ? settings.heartbeat
                : min(settings.heartbeat, settings.longestRetry, settings.helloRetry * pow(2, Double(refusals)))
            guard let last = lastHello, now.timeIntervalSince(last) < interval else { return hello(now) }
            return []
        case .registered:
            guard !welcomed && started else { return [] }
            // The dispatcher may not have the registration yet: a refusal now waits from the start.
            refusals = 0
            return hello(now)
        case .resumed:
            return started ? hello(now) : []
        case .received(let frame, let seen):
            switch frame {
            case .redirect(let redirect):
                welcomed = false
                if let failed = failedAt[redirect.endpoint], now.timeIntervalSince(failed) < settings.leasePeriod {
                    // It failed a moment ago and its lease has not run out: stay, and ask again.
                    return []
                }
                // The new dispatcher has no connection yet: if it never answers (it stopped since
                // it was named), the next one is tried after a lease period, as for any other.
                return move(to: redirect.endpoint, now)
            case .welcome:
                welcomed = true
                refusals = 0
                return []
            case .deliver(let delivery):
                // A delivery, like a signal, shows the session is there, even if its welcome was lost.
                welcomed = true
                refusals = 0
                if seen { return [.acknowledge(delivery.deliveryId)] }
                if delivery.rich != nil { return [.holdForFetch(delivery)] }
                if let message = AppPushMessage.from(payload: delivery.payload) { return [.handToApp(delivery, message)] }
                return [.show(delivery), .acknowledge(delivery.deliveryId)]
            case .signal(let signal):
                welcomed = true
                refusals = 0
                return [.syncUser(sequence: signal.sequence)]
            case .error(let error):
                // A refused hello (not registered yet, deleted, or bound to another key) is tried again
                // after a wait that doubles up to `longestRetry`: a registration on its way to the
                // dispatcher is soon there, while an installation an operator deleted stays deleted
                // until the agent starts again, since registering is for its start and its categories.
                if error.code == .notFound || error.code == .forbidden || error.code == .unauthorized || error.code == .unavailable {
                    welcomed = false
                    refusals += 1
                }
                return [.log(error.message, code: error.code)]
            case .hello, .ack, .bye:
                return []
            }
        }
    }

    private mutating func hello(_ now: Date) -> [Action] {
        lastHello = now
        return [.hello]
    }

    /// The next dispatcher after a failure, unless the last move was under `helloRetry` ago (then
    /// the next tick moves): two dispatchers that both refuse are tried in turn, not in a spin.
    private mutating func leave(_ now: Date) -> [Action] {
        if let last = lastMove, now.timeIntervalSince(last) < settings.helloRetry { return [] }
        return next(now)
    }

    /// The dispatcher configured after the current one; none when there is no other.
    private mutating func next(_ now: Date) -> [Action] {
        let index = dispatchers.firstIndex(of: current) ?? -1
        let candidate = dispatchers[(index + 1) % dispatchers.count]
        return candidate == current ? [] : move(to: candidate, now)
    }

    private mutating func move(to endpoint: String, _ now: Date) -> [Action] {
        guard endpoint != current else { return [] }
        current = endpoint
        lastMove = now
        currentFailed = false
        unconnectedSince = now
        welcomed = false
        return [.moveTo(endpoint)]
    }

    enum RichRetry: Equatable {
        case retry(after: TimeInterval)
        case giveUp
    }

    /// After a failed rich fetch: try again with backoff (0.5 s doubling to 30 s), or give up after
    /// the last attempt or once the notification has expired.
    static func richRetry(attempts: Int, maxAttempts: Int, expiresAt: Date, now: Date) -> RichRetry {
        if attempts >= max(1, maxAttempts) || expiresAt <= now { return .giveUp }
        return .retry(after: min(30, 0.5 * pow(2, Double(attempts - 1))))
    }
}
