import Foundation

/// An agent announces itself on the dispatcher's agent socket, and repeats it as its heartbeat.
/// The dispatcher then sends it every pending delivery for its installation.
public struct AgentHello: HubRequest {
    public typealias Reply = AgentWelcome
    public static let messageType: MessageType = "agent.hello"
    public var installationId: String
    /// The registry version the agent's last registration stored: a dispatcher whose index has an
    /// older one says to come again shortly, so that what the agent catches up on is planned for
    /// its installation as registered (its tags changed while it was away, say).
    public var registered: UInt64?
    public init(installationId: String, registered: UInt64? = nil) {
        self.installationId = installationId
        self.registered = registered
    }
}

/// Agent → dispatcher, as the agent stops: its session ends at once, so that the dispatcher counts
/// it gone and keeps what it would have sent for its next hello. Without it (a crash, a host that
/// went), the session ends after three heartbeats of silence.
public struct AgentBye: HubMessage {
    public static let messageType: MessageType = "agent.bye"
    public var installationId: String
    public init(installationId: String) { self.installationId = installationId }
}

public struct AgentWelcome: HubMessage {
    public static let messageType: MessageType = "agent.welcome"
    public var installationId: String
    /// Deliveries about to follow.
    public var pending: Int
    public init(installationId: String, pending: Int) {
        self.installationId = installationId
        self.pending = pending
    }
}

/// Dispatcher → agent: another dispatcher serves this installation (its shard is that one's);
/// the agent connects there and says hello again.
public struct AgentRedirect: HubMessage {
    public static let messageType: MessageType = "agent.redirect"
    public var installationId: String
    /// The agent endpoint of the dispatcher that serves it, such as tcp://10.0.0.12:7722.
    public var endpoint: String
    public init(installationId: String, endpoint: String) {
        self.installationId = installationId
        self.endpoint = endpoint
    }
}

/// One notification for one installation, pushed by the dispatcher. Delivered at least once;
/// the agent shows each `deliveryId` once and acknowledges it.
public struct AgentDelivery: HubMessage {
    public static let messageType: MessageType = "agent.deliver"
    public var deliveryId: String
    public var notificationId: String
    public var installationId: String
    /// The template it was rendered from; absent for a native notification.
    public var template: String?
    /// The rendered or native payload.
    public var payload: String
    public var expiresAt: Date
    /// For a silent rich notification: what to fetch, and the ticket that lets this installation fetch it.
    public var rich: RichReference?
    public var richTicket: String?

    public init(
        deliveryId: String, notificationId: String, installationId: String, template: String? = nil, payload: String,
        expiresAt: Date, rich: RichReference? = nil, richTicket: String? = nil
    ) {
        self.deliveryId = deliveryId
        self.notificationId = notificationId
        self.installationId = installationId
        self.template = template
        self.payload = payload
        self.expiresAt = expiresAt
        self.rich = rich
        self.richTicket = richTicket
    }
}

public struct AgentAck: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "agent.ack"
    /// Shown to the user.
    public var deliveryIds: [String]
    /// Given up on, with the reason; counted as failed, never as delivered.
    public var failures: [DeliveryFailure]?
    public init(deliveryIds: [String], failures: [DeliveryFailure]? = nil) {
        self.deliveryIds = deliveryIds
        self.failures = failures
    }
}

/// Tells a running agent its categories changed, so it registers again now.
public struct AgentCategoriesChanged: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "agent.categories"
    public var categories: [String]
    public init(categories: [String]) { self.categories = categories }
}

/// A hint from the dispatcher that a user's notifications changed up to `sequence`. It carries no
/// content: the agent fetches the changes from the sync store with its user token.
public struct AgentSignal: HubMessage {
    public static let messageType: MessageType = "agent.signal"
    public var userId: String
    public var sequence: UInt64
    public init(userId: String, sequence: UInt64) {
        self.userId = userId
        self.sequence = sequence
    }
}

/// Asks a running agent to act on one of its user's notifications.
public struct AgentUserAction: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "agent.user.action"
    public enum Action: String, Codable, Sendable, CaseIterable { case read, dismiss, activate, snooze, delete }
    public var id: String
    public var action: Action
    public init(id: String, action: Action) {
        self.id = id
        self.action = action
    }
}
