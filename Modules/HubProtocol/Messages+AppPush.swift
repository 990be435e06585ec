import Foundation

/// How urgent a push message is (RFC 8030 §5.3), least first.
public enum PushUrgency: String, Codable, Sendable, CaseIterable, Comparable {
    case veryLow = "very-low"
    case low
    case normal
    case high

    public static func < (a: PushUrgency, b: PushUrgency) -> Bool {
        allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
    }
}

/// A push message for an app registered with an agent (UnifiedPush), carried as the payload of a
/// native Linux delivery: `{"appPush":{…}}`. The agent gives `message` to the app whose endpoint
/// is `endpoint` and shows nothing.
public struct AppPushMessage: Codable, Sendable, Equatable {
    /// The endpoint's id (`PushEndpointSecret.id`), which the agent knows its app by.
    public var endpoint: String
    /// The bytes the application server posted, base64: encrypted for the app (RFC 8291), never read by the hub.
    public var message: String
    public var urgency: PushUrgency?
    public var topic: String?

    public init(endpoint: String, message: Data, urgency: PushUrgency? = nil, topic: String? = nil) {
        self.endpoint = endpoint
        self.message = message.base64EncodedString()
        self.urgency = urgency
        self.topic = topic
    }

    /// The bytes, or nil when `message` is not base64.
    public var bytes: Data? { Data(base64Encoded: message) }

    /// The delivery payload that carries this message.
    public var payload: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // A message of strings and bytes always encodes.
        return String(decoding: (try? encoder.encode(Envelope(appPush: self))) ?? Data(), as: UTF8.self)
    }

    /// The message a delivery payload carries, or nil when it is an ordinary notification.
    public static func from(payload: String) -> AppPushMessage? {
        guard payload.hasPrefix(#"{"appPush":"#) else { return nil }
        // Absent when the payload is an ordinary notification that happens to start alike.
        return try? JSONDecoder().decode(Envelope.self, from: Data(payload.utf8)).appPush
    }

    /// The send header under which a newer message replaces an undelivered one with the same
    /// value (RFC 8030 §5.4): the endpoint's topic, prefixed by its id.
    public static let topicHeader = "x-nh-topic"

    private struct Envelope: Codable { var appPush: AppPushMessage }
}

/// `nh-agent apps`: the apps registered with a running agent.
public struct AgentAppsRequest: HubRequest {
    public typealias Reply = AgentApps
    public static let messageType: MessageType = "agent.apps"
    public init() {}
}

public struct AgentApp: Codable, Sendable, Equatable {
    /// The app's D-Bus service name, such as org.example.Chat.
    public var service: String
    public var description: String?
    public var endpoint: String
    /// "2" for org.unifiedpush.Connector2, "1" for Connector1.
    public var connector: String
    /// Messages kept for the app until it can take them.
    public var waiting: Int
    public var vapid: Bool

    public init(service: String, description: String?, endpoint: String, connector: String, waiting: Int, vapid: Bool) {
        self.service = service
        self.description = description
        self.endpoint = endpoint
        self.connector = connector
        self.waiting = waiting
        self.vapid = vapid
    }
}

public struct AgentApps: HubMessage {
    public static let messageType: MessageType = "agent.apps.reply"
    public var apps: [AgentApp]
    public init(apps: [AgentApp]) { self.apps = apps }
}

/// `nh-agent apps remove APP`: unregisters every registration of the app (a service name) or the
/// one whose endpoint is given; its endpoints answer 410 from then on.
public struct AgentAppRemove: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "agent.apps.remove"
    public var app: String
    public init(app: String) { self.app = app }
}
