import Auth
import Foundation
import HubProtocol

/// APNs over HTTP/2 with token-based authentication: an ES256 JWT signed with the team's `.p8`
/// key, renewed every 50 minutes (Apple refuses one older than an hour, and a new one more often
/// than every 20 minutes).
final class AppleSender: PushSender {
    let service = PushService.apple
    let endpoint: String
    private let settings: AppleSettings
    private let key: P256Key
    private var token: (jwt: String, madeAt: Date)?
    static let tokenLifetime: TimeInterval = 50 * 60

    static let production = "https://api.push.apple.com"
    static let sandbox = "https://api.sandbox.push.apple.com"

    init(_ settings: AppleSettings, readFile: (String) throws(PushConfigurationError) -> String) throws(PushConfigurationError) {
        for (name, value) in [("keyId", settings.keyId), ("teamId", settings.teamId)] {
            guard value.count == 10, value.allSatisfy({ $0.isASCII && ($0.isUppercase || $0.isNumber) }) else {
                throw PushConfigurationError(
                    "push.apple.\(name) '\(value)' must be the 10 characters Apple shows, upper-case letters and digits, such as ABC123DEFG")
            }
        }
        guard !settings.bundleId.isEmpty, !settings.bundleId.contains(where: { $0 == " " || $0 == "/" }) else {
            throw PushConfigurationError("push.apple.bundleId '\(settings.bundleId)' must be the app's bundle id, such as com.example.app")
        }
        switch settings.endpoint {
        case "production": endpoint = Self.production
        case "sandbox", "development": endpoint = Self.sandbox
        default: endpoint = try httpsEndpoint(settings.endpoint, setting: "push.apple.endpoint")
        }
        let pem: String
        if let text = settings.key {
            pem = text
        } else if let file = settings.keyFile {
            pem = try readFile(file)
        } else {
            throw PushConfigurationError("push.apple needs keyFile, the .p8 key Apple issued for key id \(settings.keyId)")
        }
        do {
            key = try P256Key(pem: pem)
        } catch {
            throw PushConfigurationError("push.apple key \(settings.keyFile.map { "'\($0)' " } ?? ""): \(error.message); give the .p8 file Apple issued (a P-256 private key in PEM)")
        }
        self.settings = settings
    }

    func renew(now: Date) { token = nil }

    private func jwt(now: Date) throws(PushRequestError) -> String {
        if let token, now.timeIntervalSince(token.madeAt) < Self.tokenLifetime { return token.jwt }
        do {
            let jwt = try JWT.es256(
                header: ["kid": settings.keyId], claims: ["iss": .string(settings.teamId), "iat": .number(Double(Int(now.timeIntervalSince1970)))],
                key: key)
            token = (jwt, now)
            return jwt
        } catch {
            throw PushRequestError(outcome: "InvalidCredentials", reason: "cannot sign the APNs token: \(error.message)")
        }
    }

    func request(for message: PushMessage, now: Date) throws(PushRequestError) -> PushHTTPRequest {
        let device = message.pushChannel.lowercased()
        guard !device.isEmpty, device.count % 2 == 0, device.allSatisfy(\.isHexDigit) else {
            throw PushRequestError(outcome: "BadChannel", reason: "the APNs device token must be hexadecimal")
        }
        let aps = JSONValue.parse(message.payload)?["aps"]?.objectValue
        let headers = message.headers
        // A notification with nothing to show is a background one, which Apple wants at priority 5.
        let silent = aps.map { $0["content-available"] != nil && $0["alert"] == nil && $0["sound"] == nil && $0["badge"] == nil } ?? false
        let pushType = headers["apns-push-type"] ?? (silent ? "background" : "alert")
        var expiration = String(Int(message.expiresAt.timeIntervalSince1970))
        if let given = headers["apns-expiration"] {
            expiration = given
        } else if let azure = headers["servicebusnotification-apns-expiry"], let date = WireDate.parse(azure) {
            expiration = String(Int(date.timeIntervalSince1970))
        }
        var fields: [(String, String)] = [
            ("authorization", "bearer \(try jwt(now: now))"),
            ("apns-topic", headers["apns-topic"] ?? settings.bundleId),
            ("apns-push-type", pushType),
            ("apns-priority", headers["apns-priority"] ?? (pushType == "background" ? "5" : "10")),
            ("apns-expiration", expiration),
            ("apns-id", Self.uuid(for: message.deliveryId)),
            ("content-type", "application/json"),
        ]
        if let collapse = headers["apns-collapse-id"] { fields.append(("apns-collapse-id", collapse)) }
        return PushHTTPRequest(url: "\(endpoint)/3/device/\(device)", headers: fields, body: Data(message.payload.utf8))
    }

    /// The same UUID for every attempt of one delivery, so that Apple's logs show them as one.
    static func uuid(for deliveryId: String) -> String {
        var bytes = [UInt8](Crypto.sha256(Data(deliveryId.utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let hex = bytes.map { String(format: "%02X", $0) }.joined()
        let parts = [hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4), hex.dropFirst(20)]
        return parts.joined(separator: "-")
    }

    func classify(_ response: PushHTTPResponse, now: Date) -> PushResult {
        if response.status == 200 { return .delivered }
        let reason = response.json?["reason"]?.stringValue
        if let common = common(response, reason: reason, now: now) { return common }
        switch (response.status, reason) {
        case (410, _), (400, "BadDeviceToken"):
            return .channelExpired(reason: response.describe(reason ?? "Unregistered"))
        case (400, "DeviceTokenNotForTopic"), (400, "TopicDisallowed"), (400, "BadTopic"):
            return .failed(outcome: "WrongToken", reason: response.describe(reason))
        case (403, "ExpiredProviderToken"):
            return .renewCredentials(reason: response.describe(reason))
        case (403, _):
            return .failed(outcome: "InvalidCredentials", reason: response.describe(reason))
        default:
            return .failed(outcome: "PnsInterfaceError", reason: response.describe(reason))
        }
    }

    func info(source: String) -> PushServiceInfo {
        PushServiceInfo(
            service: service.rawValue, platform: service.platform.rawValue, endpoint: endpoint, source: source,
            settings: ["keyId": settings.keyId, "teamId": settings.teamId, "bundleId": settings.bundleId],
            keyFingerprint: Crypto.sha256(key.publicPoint).hexString)
    }
}
