/// The one shape of every message on the bus:
/// `{"v": 1, "type": "...", "id": "...", "auth": "...", "hub": "...", "payload": {...}}`.
public struct Envelope<Payload: HubMessage>: Codable, Sendable, Equatable {
    /// Protocol version.
    public var v: Int
    public var type: MessageType
    /// Correlation id: a reply carries its request's id.
    public var id: String
    /// A credential: a shared-access token or a user token. Omitted when the request needs none.
    public var auth: String?
    /// The hub of the namespace the request is for (`HubName`); omitted for the default hub, the
    /// one the config names.
    public var hub: String?
    public var payload: Payload

    public init(id: String, auth: String? = nil, hub: String? = nil, payload: Payload) {
        v = HubProtocolVersion.current
        type = Payload.messageType
        self.id = id
        self.auth = auth
        self.hub = hub
        self.payload = payload
    }
}

/// The envelope's fields without the payload, read first to choose how to decode the rest.
public struct EnvelopeHeader: Codable, Sendable, Equatable {
    public var v: Int
    public var type: MessageType
    public var id: String
    public var auth: String?
    public var hub: String?

    public init(v: Int = HubProtocolVersion.current, type: MessageType, id: String, auth: String? = nil, hub: String? = nil) {
        self.v = v
        self.type = type
        self.id = id
        self.auth = auth
        self.hub = hub
    }
}

public enum HubProtocolVersion {
    /// The version this build writes.
    public static let current = 1
    /// The versions this build reads.
    public static let supported: ClosedRange<Int> = 1...1
}
