import Auth
import Foundation
import HubProtocol

/// Baidu Cloud Push, REST API 3.0. There is no token: each request carries the app's API key, a
/// timestamp and a signature, the MD5 of the method, the URL, every parameter as `key=value` in
/// key order and the secret key, URL-encoded as PHP encodes (the API's reference). Each delivery is
/// one `POST …/push/single_device` to the device's channel id (the part after the `-` of a
/// `userId-channelId` channel, as registrations carry it), with the payload as `msg`: a
/// notification when it has a `description` (Android) or `aps` (iOS), else a pass-through message.
final class BaiduSender: PushSender {
    let service = PushService.baidu
    let endpoint: String
    private let apiKey: String
    private let secretKey: String
    /// Baidu refuses a request without a user agent in its SDKs' form.
    static let userAgent = "BCCS_SDK/3.0 (Linux; notification-hub) Swift (notification hub)"
    /// A message is kept for an offline device at most a week.
    static let maxExpiry = 604_800
    /// At most 4 KB of message (Android's limit, the larger of the two).
    static let maxMessageBytes = 4_096

    init(_ settings: BaiduSettings) throws(PushConfigurationError) {
        guard !settings.apiKey.isEmpty, !settings.secretKey.isEmpty else {
            throw PushConfigurationError("push.baidu needs apiKey and secretKey: the app's, from the Baidu push console")
        }
        apiKey = settings.apiKey
        secretKey = settings.secretKey
        endpoint = try httpsEndpoint(settings.endpoint ?? "https://api.tuisong.baidu.com/rest/3.0", setting: "push.baidu.endpoint")
    }

    /// `sign` for a request of `method` to `url` with `parameters` (sign itself left out).
    static func signature(method: String, url: String, parameters: [(String, String)], secretKey: String) -> String {
        let joined = parameters.sorted { $0.0 < $1.0 }.map { "\($0.0)=\($0.1)" }.joined()
        return Crypto.md5(Data(FormEncoding.php(method.uppercased() + url + joined + secretKey).utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// Each request is signed on its own: there is no token to renew.
    func renew(now: Date) {}

    /// The channel id of a `userId-channelId` channel, or the whole channel.
    static func channelId(_ channel: String) -> String {
        guard let dash = channel.firstIndex(of: "-") else { return channel }
        return String(channel[channel.index(after: dash)...])
    }

    func request(for message: PushMessage, now: Date) throws(PushRequestError) -> PushHTTPRequest {
        let channel = Self.channelId(message.pushChannel)
        guard !channel.isEmpty, channel.allSatisfy({ $0.isASCII && $0.isNumber }) else {
            throw PushRequestError(outcome: "BadChannel", reason: "a Baidu channel id is digits, as userId-channelId or the channel id alone")
        }
        guard let object = JSONValue.parse(message.payload)?.objectValue else {
            throw PushRequestError(outcome: "PnsInterfaceError", reason: "a baidu payload is a JSON object")
        }
        guard message.payload.utf8.count <= Self.maxMessageBytes else {
            throw PushRequestError(outcome: "InvalidNotificationSize", reason: "the message is \(message.payload.utf8.count) bytes; Baidu takes at most 4 KB")
        }
        let iOS = object["aps"] != nil
        let notification = iOS || object["description"] != nil
        let expires = min(max(1, Int(message.expiresAt.timeIntervalSince(now).rounded(.down))), Self.maxExpiry)
        let url = "\(endpoint)/push/single_device"
        var parameters = [
            ("apikey", apiKey), ("timestamp", String(Int(now.timeIntervalSince1970))), ("device_type", iOS ? "4" : "3"),
            ("channel_id", channel), ("msg_type", notification ? "1" : "0"), ("msg", message.payload), ("msg_expires", String(expires)),
        ]
        parameters.append(("sign", Self.signature(method: "POST", url: url, parameters: parameters, secretKey: secretKey)))
        return PushHTTPRequest(
            url: url,
            headers: [("content-type", "application/x-www-form-urlencoded;charset=utf-8"), ("user-agent", Self.userAgent)],
            body: Data(parameters.map { FormEncoding.php($0.0) + "=" + FormEncoding.php($0.1) }.joined(separator: "&").utf8))
    }

    /// Baidu's error codes: 30607 (the channel's token timed out) and 30608 (no such binding) are
    /// the channel gone; 30603 (authentication) and 30612 (the app is not allowed) the credentials;
    /// 30699 (too many requests) and 30604 (quota used up) throttling; 30600 and 30606 (a request
    /// too old, signed again with a fresh timestamp) are tried again; the rest refuse the message.
    func classify(_ response: PushHTTPResponse, now: Date) -> PushResult {
        let object = response.json
        let code = object?["error_code"]?.doubleValue.flatMap { Int(exactly: $0) }
        let reason = code.map { "\($0) \(object?["error_msg"]?.plainText ?? "")".trimmingCharacters(in: .whitespaces) }
        if response.status == 200, code == nil, object?["response_params"] != nil { return .delivered }
        switch code {
        case 30607?: return .channelExpired(reason: response.describe(reason), outcome: "ExpiredChannel")
        case 30608?: return .channelExpired(reason: response.describe(reason), outcome: "BadChannel")
        case 30603?, 30612?, 30613?: return .failed(outcome: "InvalidCredentials", reason: response.describe(reason))
        case 30699?, 30604?: return .retry(reason: response.describe(reason), after: response.retryAfter(now: now) ?? 60)
        case 30600?, 30606?: return .retry(reason: response.describe(reason), after: response.retryAfter(now: now))
        case let code?: return .failed(outcome: "PnsInterfaceError", reason: response.describe(reason ?? String(code)))
        case nil:
            return common(response, reason: nil, now: now) ?? .failed(outcome: "PnsInterfaceError", reason: response.describe(nil))
        }
    }

    func info(source: String) -> PushServiceInfo {
        PushServiceInfo(service: service.rawValue, platform: service.platform.rawValue, endpoint: endpoint, source: source, settings: ["apiKey": apiKey])
    }
}
