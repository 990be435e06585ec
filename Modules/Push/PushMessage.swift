import Foundation
import HubProtocol

/// One delivery to a device on a push service: the rendered payload, the device's channel, and the
/// platform headers that came with the send or the template.
public struct PushMessage: Sendable, Equatable {
    public var deliveryId: String
    public var notificationId: String
    public var installationId: String
    public var platform: Platform
    /// The device handle: an APNs device token, an FCM registration token, or a browser's
    /// subscription as JSON (`{"auth":…,"endpoint":…,"p256dh":…}`).
    public var pushChannel: String
    public var payload: String
    /// Lower-case names, such as `apns-push-type` or `urgency`.
    public var headers: [String: String]
    public var expiresAt: Date

    public init(
        deliveryId: String, notificationId: String, installationId: String, platform: Platform, pushChannel: String, payload: String,
        headers: [String: String] = [:], expiresAt: Date
    ) {
        self.deliveryId = deliveryId
        self.notificationId = notificationId
        self.installationId = installationId
        self.platform = platform
        self.pushChannel = pushChannel
        self.payload = payload
        self.headers = headers
        self.expiresAt = expiresAt
    }
}

/// What a push service's answer means for one delivery.
public enum PushResult: Sendable, Equatable {
    /// The push service took it.
    case delivered
    /// The push service took it, and named the device's channel anew (ADM's canonical registration
    /// id): the installation's channel becomes `to`.
    case channelMoved(to: String)
    /// The device's channel is gone (the app was removed, or the token is no longer valid): the
    /// installation goes, as Notification Hubs removes registrations with expired channels.
    /// `outcome` is the Notification Hubs outcome name it counts under: ExpiredChannel, or
    /// BadChannel for a channel the service does not know.
    case channelExpired(reason: String, outcome: String = "ExpiredChannel")
    /// Worth sending again: throttled, a server error, or no answer. `after` comes from Retry-After.
    case retry(reason: String, after: TimeInterval?)
    /// The hub's token for the service was refused: renewed, then sent again; a delivery refused
    /// again with a token renewed for it fails as InvalidCredentials.
    case renewCredentials(reason: String)
    /// Not worth sending again. `outcome` is the Notification Hubs outcome name it counts under,
    /// such as WrongToken or InvalidNotificationSize; `reason` keeps the service's own words.
    case failed(outcome: String, reason: String)
}

extension PushResult {
    /// The device's channel is gone.
    public var isChannelGone: Bool {
        if case .channelExpired = self { return true }
        return false
    }
}

/// A request that could not even be made, such as a payload a push service cannot carry.
public struct PushRequestError: Error, Equatable, Sendable {
    public var outcome: String
    public var reason: String
    public init(outcome: String, reason: String) {
        self.outcome = outcome
        self.reason = reason
    }
}

/// What a push service's answers have come to, since start.
public struct PushCounters: Sendable, Equatable {
    public var sent = 0
    public var delivered = 0
    public var retried = 0
    public var expiredChannels = 0
    public var failed = 0
    public var tokenRequests = 0
    /// By the service's own error code, such as `Unregistered` or `UNAVAILABLE`.
    public var errors: [String: Int] = [:]
    /// What the service said of its answers beside the status, by what it said, such as WNS's
    /// `X-WNS-Status: received` or `X-WNS-DeviceConnectionStatus: connected`.
    public var answers: [String: Int] = [:]
    public init() {}
}

extension PushHTTPResponse {
    /// Seconds to wait from a Retry-After header: a number of seconds, or an HTTP date.
    public func retryAfter(now: Date = Date()) -> TimeInterval? {
        guard let text = headers["retry-after"]?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let seconds = Double(text), seconds >= 0 { return min(seconds, 3_600) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: text) else { return nil }
        return min(max(0, date.timeIntervalSince(now)), 3_600)
    }

    /// The body as JSON, when it is JSON.
    var json: JSONValue? { JSONValue.parse(body) }

    /// What to keep of an answer for the outcome details: status, and the service's reason.
    func describe(_ reason: String?) -> String {
        if let transportError { return "no answer: \(transportError)" }
        return reason.map { "HTTP \(status) \($0)" } ?? "HTTP \(status)"
    }
}
