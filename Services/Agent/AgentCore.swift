import Foundation
import HubProtocol

/// The agent's decisions on its channel, with no IO: when to say hello, what to do with each
/// message from the dispatcher (show once, acknowledge, hold a rich one for its fetch, sync the
/// user's notifications, register again) and when to try a failed rich fetch again.
/// `AgentDaemon` feeds it events and carries out the actions, in order.
struct AgentCore {
    struct Settings: Equatable {
        /// Seconds between hellos once welcomed: the heartbeat.
        var heartbeat: TimeInterval = 5
        /// Seconds between hellos until a welcome comes.
        var helloRetry: TimeInterval = 0.5
    }

    enum Event: Equatable {
        /// The channel's handshake completed, on first connect or after a reconnect.
        case connected
        /// The channel's connection closed (the dispatcher went, or its heartbeats stopped).
        case disconnected
        /// A message from the dispatcher. `seen`: the delivery was shown before (only for deliveries).
        case received(AgentFrame, seen: Bool)
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
        /// Another dispatcher serves this installation: connect there instead.
        case moveTo(String)
        /// The dispatcher has not answered for three heartbeats: try the next one configured.
        case tryNextDispatcher
    }

    let settings: Settings
    private(set) var welcomed = false
    /// Hellos refused in a row: each doubles the wait before the next, up to a heartbeat.
    private(set) var refusals = 0
    var refused: Bool { refusals > 0 }
    private var lastHello: Date?
    /// Since when the channel has had no connection; nil while it has one.
    private var unconnectedSince: Date?
    private var started = false

    init(settings: Settings = Settings()) {
        self.settings = settings
    }

    mutating func on(_ event: Event, now: Date) -> [Action] {
        switch event {
        case .connected:
            welcomed = false
            started = true
            unconnectedSince = nil
            return hello(now)
        case .disconnected:
            welcomed = false
            unconnectedSince = unconnectedSince ?? now
            return []
        case .tick:
            if !started {
                started = true
                unconnectedSince = now
            }
            // No connection for three heartbeats: that dispatcher is gone or cannot be reached,
            // and another may serve this installation.
            if let since = unconnectedSince, now.timeIntervalSince(since) > 3 * settings.heartbeat {
                unconnectedSince = now
                return [.tryNextDispatcher]
            }
            let interval = welcomed ? settings.heartbeat
                : min(settings.heartbeat, settings.helloRetry * pow(2, Double(refusals)))
            guard let last = lastHello, now.timeIntervalSince(last) < interval else { return hello(now) }
            return []
        case .received(let frame, let seen):
            switch frame {
            case .redirect(let redirect):
                welcomed = false
                // The new dispatcher has no connection yet: if it never answers (it stopped since
                // it was named), the next one is tried after three heartbeats, as for any other.
                unconnectedSince = now
                return [.moveTo(redirect.endpoint)]
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
                // after a wait that doubles up to a heartbeat: a registration on its way to the
                // dispatcher is soon there, while an installation an operator deleted stays deleted
                // until the agent starts again, since registering is for its start and its categories.
                if error.code == .notFound || error.code == .forbidden || error.code == .unauthorized || error.code == .unavailable {
                    welcomed = false
                    refusals += 1
                }
                return [.log(error.message, code: error.code)]
            case .hello, .ack:
                return []
            }
        }
    }

    private mutating func hello(_ now: Date) -> [Action] {
        lastHello = now
        return [.hello]
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
