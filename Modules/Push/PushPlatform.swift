import HubProtocol

/// The platforms whose own push services the dispatcher delivers to, beside its Linux agents.
public enum PushService: String, CaseIterable, Codable, Sendable {
    /// Apple Push Notification service, for `apns` installations.
    case apple
    /// Firebase Cloud Messaging HTTP v1, for `fcmv1` installations.
    case fcm
    /// Web Push (RFC 8030), for `browser` installations.
    case browser

    public init?(platform: Platform) {
        switch platform {
        case .apns: self = .apple
        case .fcmv1: self = .fcm
        case .browser: self = .browser
        default: return nil
        }
    }

    public var platform: Platform {
        switch self {
        case .apple: return .apns
        case .fcm: return .fcmv1
        case .browser: return .browser
        }
    }
}
