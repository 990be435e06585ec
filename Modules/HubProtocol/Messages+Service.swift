/// Asks a service whether it is up. Every service answers it on its request socket.
public struct HealthRequest: HubRequest {
    public typealias Reply = HealthReply
    public static let messageType: MessageType = "health"
    public init() {}
}

public struct HealthReply: HubMessage {
    public static let messageType: MessageType = "health.reply"
    /// The executable's name, such as "nh-registry".
    public var service: String
    /// "ok", or "degraded" when a dependency is unreachable.
    public var status: String
    public var version: String
    public var pid: Int32
    public var uptimeSeconds: Double
    /// What the service has bound, by role, such as "requests" or "events".
    public var endpoints: [String: String]
    /// Service-specific figures, such as how many installations the dispatcher knows.
    public var details: [String: String]?

    public init(
        service: String, status: String, version: String, pid: Int32, uptimeSeconds: Double, endpoints: [String: String],
        details: [String: String]? = nil
    ) {
        self.service = service
        self.status = status
        self.version = version
        self.pid = pid
        self.uptimeSeconds = uptimeSeconds
        self.endpoints = endpoints
        self.details = details
    }
}

/// The reply to any request that failed.
public struct ErrorReply: HubMessage {
    public static let messageType: MessageType = "error"
    public var code: ErrorCode
    public var message: String

    public init(code: ErrorCode, message: String) {
        self.code = code
        self.message = message
    }
}

/// A success that carries nothing more.
public struct Ack: HubMessage {
    public static let messageType: MessageType = "ack"
    public init() {}
}

/// Asks a service for its counters, for the gateway's /metrics.
public struct MetricsRequest: HubRequest {
    public typealias Reply = MetricsReply
    public static let messageType: MessageType = "metrics"
    public init() {}
}

/// Prometheus samples: each key is a metric name with its labels, such as
/// `nh_requests_total{type="health"}`.
public struct MetricsReply: HubMessage {
    public static let messageType: MessageType = "metrics.reply"
    public var service: String
    public var samples: [String: Double]
    public init(service: String, samples: [String: Double]) {
        self.service = service
        self.samples = samples
    }
}
