import HubProtocol

/// The platforms whose own push services the dispatcher delivers to, beside its Linux agents.
public enum PushService: String, CaseIterable, Codable, Sendable {
    /// Apple Push Notification service, for `apns` installations.
    case apple
    /// Firebase Cloud Messaging HTTP v1, for `fcmv1` installations.
    case fcm
    /// Web Push (RFC 8030), for `browser` installations.
    case browser
    /// Windows Push Notification Services, for `wns` installations.
    case wns
    /// Amazon Device Messaging, for `adm` installations.
    case adm
    /// Baidu Cloud Push, for `baidu` installations.
    case baidu

    public init?(platform: Platform) {
        switch platform {
        case .apns: self = .apple
        case .fcmv1: self = .fcm
        case .browser: self = .browser
        case .wns: self = .wns
        case .adm: self = .adm
        case .baidu: self = .baidu
        case .linux, .gcm: return nil
        }
    }

    public var platform: Platform {
        switch self {
        case .apple: return .apns
        case .fcm: return .fcmv1
        case .browser: return .browser
        case .wns: return .wns
        case .adm: return .adm
        case .baidu: return .baidu
        }
    }
}
