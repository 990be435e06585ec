import Foundation

/// The push platforms an installation can be on, with the native send format of each as the
/// Notification Hubs REST API names it, and the checks each platform's service makes of a payload.
public enum Platform: String, CaseIterable, Codable, Sendable {
    /// The hub's own Linux agents.
    case linux
    case apns, fcmv1, gcm, wns, adm, baidu, browser

    /// An installation's or registration's platform name, in any case.
    public init?(name: String) {
        self.init(rawValue: name.lowercased())
    }

    /// `ServiceBusNotification-Format` of a native send to this platform.
    public var format: String {
        switch self {
        case .linux: return "linux"
        case .apns: return "apple"
        case .fcmv1: return "fcmv1"
        case .gcm: return "gcm"
        case .wns: return "windows"
        case .adm: return "adm"
        case .baidu: return "baidu"
        case .browser: return "browser"
        }
    }

    /// The platform a native send's format goes to.
    public init?(format: String) {
        guard let platform = Platform.allCases.first(where: { $0.format == format.lowercased() }) else { return nil }
        self = platform
    }

    /// Every format name, for error messages.
    public static var formats: String { (["template"] + allCases.map(\.format)).joined(separator: ", ") }

    /// The largest payload the platform's push service takes, in bytes.
    public var maxPayloadBytes: Int {
        switch self {
        case .linux: return 64 * 1024
        case .apns, .fcmv1, .gcm, .baidu: return 4_096
        // WNS refuses more than 5,000 bytes (413).
        case .wns: return 5_000
        case .adm: return 6_144
        // A Web Push message is at most 4,096 bytes once encrypted (RFC 8291): its header and
        // tag leave 3,993 for the payload.
        case .browser: return 3_993
        }
    }

    /// The request headers a native send passes on to this platform (lowercased prefixes).
    public var headerPrefixes: [String] {
        switch self {
        case .apns: return ["apns-", "servicebusnotification-apns-"]
        case .wns: return ["x-wns-"]
        case .browser: return ["urgency", "topic"]
        // A newer send with the same topic replaces one not yet delivered (AppPushMessage.topicHeader).
        case .linux: return ["x-nh-topic"]
        default: return []
        }
    }

    public static let wnsTypes = ["wns/toast", "wns/tile", "wns/badge", "wns/raw"]

    /// Headers a send or template hands a push service: each name an HTTP token and each value
    /// visible text (RFC 9110 §5.5), at most 1,024 bytes; a CR or LF in one would start another
    /// header, or another request, on the service's connection. `what` names them in the error.
    public static func checkHeaders(_ headers: [String: String], what: String = "header") throws(HubError) {
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
            guard isHeaderName(name) else {
                throw HubError(.invalidArgument, "\(what) name '\(name.prefix(64))' must be letters, digits and !#$%&'*+-.^_`|~")
            }
            guard isHeaderValue(value) else {
                throw HubError(.invalidArgument, "\(what) '\(name)' holds a control character (such as a line break); a header value is one line of text")
            }
            guard value.utf8.count <= 1_024 else {
                throw HubError(.invalidArgument, "\(what) '\(name)' is \(value.utf8.count) bytes; a header value takes at most 1,024")
            }
        }
    }

    /// A header name: an HTTP token.
    public static func isHeaderName(_ name: String) -> Bool { !name.isEmpty && name.utf8.allSatisfy(isTokenByte) }

    /// A header value: visible text, spaces and tabs, and no control character.
    public static func isHeaderValue(_ value: String) -> Bool { value.utf8.allSatisfy { $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) } }

    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"): true
        default: "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    /// Whether `channel` is a WNS channel URI under `domain` (such as notify.windows.com): an
    /// https URL on a host beneath it, as Windows hands them out, never an address a client chose.
    public static func isWNSChannel(_ channel: String, domain: String) -> Bool {
        let domain = domain.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "."))
        guard let url = URL(string: channel), url.scheme?.lowercased() == "https", let host = url.host?.lowercased() else { return false }
        return host.hasSuffix("." + domain)
    }

    /// Checks a native payload, with the headers it came with (lowercased names), as the platform's
    /// push service would, so that a send it would refuse is refused when it is made.
    public func check(payload: String, headers: [String: String] = [:]) throws(HubError) {
        try Platform.checkHeaders(headers)
        let size = payload.utf8.count
        guard size > 0 else { throw HubError(.invalidPayload, "a native \(format) notification needs a body") }
        guard size <= maxPayloadBytes else {
            throw HubError(.payloadTooLarge, "the \(format) payload is \(size) bytes; \(rawValue) takes at most \(maxPayloadBytes)")
        }
        func object() throws(HubError) -> [String: Any] {
            // Not JSON is refused just below, with what the platform expects.
            guard let object = (try? JSONSerialization.jsonObject(with: Data(payload.utf8))) as? [String: Any] else {
                throw HubError(.invalidPayload, "a native \(format) payload must be a JSON object")
            }
            return object
        }
        switch self {
        case .linux:
            // Not JSON is refused just below.
            guard (try? JSONSerialization.jsonObject(with: Data(payload.utf8), options: [.fragmentsAllowed])) != nil else {
                throw HubError(.invalidPayload, "a native body for linux agents must be JSON")
            }
        case .apns:
            guard try object()["aps"] is [String: Any] else {
                throw HubError(.invalidPayload, "an apple payload needs an 'aps' object, such as {\"aps\":{\"alert\":\"…\"}}")
            }
            if let type = headers["apns-push-type"],
                !["alert", "background", "voip", "complication", "fileprovider", "mdm", "location", "liveactivity", "pushtotalk"].contains(type)
            {
                throw HubError(.invalidArgument, "apns-push-type '\(type)' is not one APNs knows, such as alert or background")
            }
            if let priority = headers["apns-priority"], !["5", "10", "1"].contains(priority) {
                throw HubError(.invalidArgument, "apns-priority '\(priority)' must be 10, 5 or 1")
            }
        case .fcmv1:
            guard try object()["message"] is [String: Any] else {
                throw HubError(.invalidPayload, "an fcmv1 payload needs a 'message' object, such as {\"message\":{\"notification\":{\"body\":\"…\"}}}")
            }
        case .gcm, .baidu:
            _ = try object()
        case .adm:
            let message = try object()
            guard message["data"] is [String: Any] || message["notification"] is [String: Any] else {
                throw HubError(
                    .invalidPayload, "an adm payload needs a 'data' or 'notification' object, such as {\"data\":{\"message\":\"…\"}}")
            }
        case .wns:
            guard let type = headers["x-wns-type"] else {
                throw HubError(.invalidArgument, "a windows notification needs X-WNS-Type: wns/toast, wns/tile, wns/badge or wns/raw")
            }
            guard Platform.wnsTypes.contains(type) else {
                throw HubError(.invalidArgument, "X-WNS-Type '\(type)' must be wns/toast, wns/tile, wns/badge or wns/raw")
            }
            if type != "wns/raw" {
                let trimmed = payload.drop { $0 == " " || $0 == "\n" || $0 == "\r" || $0 == "\t" || $0 == "\u{FEFF}" }
                let root = type.dropFirst(4)
                guard trimmed.hasPrefix("<"), trimmed.contains("<\(root)") else {
                    throw HubError(.invalidPayload, "a \(type) notification's body must be XML with a <\(root)> element")
                }
            }
        case .browser:
            if let urgency = headers["urgency"], !["very-low", "low", "normal", "high"].contains(urgency) {
                throw HubError(.invalidArgument, "Urgency '\(urgency)' must be very-low, low, normal or high (RFC 8030)")
            }
            if let topic = headers["topic"],
                topic.isEmpty || topic.utf8.count > 32
                    || !topic.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x2D || $0 == 0x5F })
            {
                throw HubError(.invalidArgument, "Topic '\(topic)' must be 1 to 32 characters of the base64url alphabet (RFC 8030)")
            }
        }
    }
}
