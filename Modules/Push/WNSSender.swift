import Auth
import Foundation
import HubProtocol

/// Windows Push Notification Services. The access token comes from the Microsoft account service
/// (the app's Package SID and secret, scope `notify.windows.com`) or from Microsoft Entra (an
/// application's tenant, client id and secret, scope `https://wns.windows.com/.default`), and is
/// kept until a minute before it expires. Each delivery is one POST to the device's channel URI,
/// which must be an https URL under the channel domain, so that the hub never posts where a client
/// chose; its kind (`X-WNS-Type`) says toast, tile or badge (XML) or raw (bytes).
final class WNSSender: PushSender {
    enum Credentials: Equatable {
        case packageSid(String)
        case entra(tenantId: String, clientId: String)
    }

    let service = PushService.wns
    let credentials: Credentials
    private let secret: String
    let tokenEndpoint: String
    let channelDomain: String
    /// A day when the answer does not say.
    private let accessToken = AccessTokenKeeper(defaultLifetime: 86_400)
    /// WNS refuses a larger body (413).
    static let maxBodyBytes = 5_000
    static let classicTokenEndpoint = "https://login.live.com/accesstoken.srf"
    static let classicScope = "notify.windows.com"
    static let entraScope = "https://wns.windows.com/.default"
    /// The headers a send or a template may set, passed on as they are.
    static let passedHeaders = [
        "x-wns-cache-policy", "x-wns-tag", "x-wns-group", "x-wns-requestforstatus", "x-wns-ttl", "x-wns-suppresspopup", "x-wns-priority",
    ]

    var endpoint: String { tokenEndpoint }

    init(_ settings: WNSSettings, channelDomain: String) throws(PushConfigurationError) {
        func given(_ value: String?) -> String? { value.flatMap { $0.isEmpty ? nil : $0 } }
        guard let secret = given(settings.secret) else {
            throw PushConfigurationError("push.wns needs 'secret': the app's client secret (with packageSid) or the Entra application's (with tenantId and clientId)")
        }
        self.secret = secret
        switch (given(settings.packageSid), given(settings.tenantId), given(settings.clientId)) {
        case (let sid?, nil, nil):
            guard sid.hasPrefix("ms-app://") else {
                throw PushConfigurationError("push.wns.packageSid '\(sid)' must be the Package SID as the Store shows it, ms-app://S-1-15-2-…")
            }
            credentials = .packageSid(sid)
            tokenEndpoint = try httpsEndpoint(given(settings.tokenEndpoint) ?? Self.classicTokenEndpoint, setting: "push.wns.tokenEndpoint")
        case (nil, let tenant?, let client?):
            guard Self.isIdentifier(tenant), Self.isIdentifier(client) else {
                throw PushConfigurationError("push.wns: tenantId and clientId are the directory and application ids Entra shows (GUIDs)")
            }
            credentials = .entra(tenantId: tenant, clientId: client)
            tokenEndpoint = try httpsEndpoint(
                given(settings.tokenEndpoint) ?? "https://login.microsoftonline.com/\(tenant)/oauth2/v2.0/token", setting: "push.wns.tokenEndpoint")
        default:
            throw PushConfigurationError(
                "push.wns takes either packageSid and secret (the classic form), or tenantId, clientId and secret (a Microsoft Entra application)")
        }
        let domain = channelDomain.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "."))
        guard !domain.isEmpty, !domain.contains("/"), !domain.contains(":") else {
            throw PushConfigurationError("push.wnsChannelDomain '\(channelDomain)' must be a domain, such as notify.windows.com")
        }
        self.channelDomain = domain
    }

    static func isIdentifier(_ text: String) -> Bool {
        !text.isEmpty && text.count <= 64 && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") }
    }

    func authorization(now: Date) -> PushAuthorization {
        accessToken.authorization(now: now) {
            let (client, scope) = switch credentials {
            case .packageSid(let sid): (sid, Self.classicScope)
            case .entra(_, let client): (client, Self.entraScope)
            }
            let form = [("grant_type", "client_credentials"), ("client_id", client), ("client_secret", secret), ("scope", scope)]
            return PushHTTPRequest(
                url: tokenEndpoint, headers: [("content-type", "application/x-www-form-urlencoded")], body: Data(FormEncoding.body(form).utf8))
        }
    }

    /// `expires_in` comes as a number (Microsoft account) or a string (Entra).
    func tokenAnswered(_ response: PushHTTPResponse, now: Date) -> String? { accessToken.answered(response, now: now) }

    func renew(now: Date) { accessToken.renew() }

    /// Whether `channel` is an https URL on a host under the channel domain.
    func accepts(channel: String) -> Bool { Platform.isWNSChannel(channel, domain: channelDomain) }

    /// The kind a send or template named, or, for a template registered without one, the kind its
    /// XML's root element says, after any XML declaration, processing instruction or comment (a
    /// body that is not XML goes raw).
    static func kind(of message: PushMessage) -> String {
        if let type = message.headers["x-wns-type"] { return type.trimmingCharacters(in: .whitespaces).lowercased() }
        var rest = Substring(message.payload)
        while true {
            rest = rest.drop { $0.isWhitespace || $0 == "\u{FEFF}" }
            if rest.hasPrefix("<?"), let end = rest.range(of: "?>") {
                rest = rest[end.upperBound...]
            } else if rest.hasPrefix("<!--"), let end = rest.range(of: "-->") {
                rest = rest[end.upperBound...]
            } else {
                break
            }
        }
        for root in ["toast", "tile", "badge"] where rest.hasPrefix("<\(root)") {
            // <toast>, <toast …> or <toast/>, not <toaster>.
            let next = rest.dropFirst(root.count + 1).first
            if next == nil || next == ">" || next == "/" || next!.isWhitespace { return "wns/\(root)" }
        }
        return "wns/raw"
    }

    func request(for message: PushMessage, now: Date) throws(PushRequestError) -> PushHTTPRequest {
        guard accepts(channel: message.pushChannel) else {
            throw PushRequestError(
                outcome: "BadChannel", reason: "the channel URI is not an https URL under \(channelDomain); WNS channels are")
        }
        let type = Self.kind(of: message)
        guard Platform.wnsTypes.contains(type) else {
            throw PushRequestError(outcome: "PnsInterfaceError", reason: "X-WNS-Type '\(type)' is not wns/toast, wns/tile, wns/badge or wns/raw")
        }
        let body = Data(message.payload.utf8)
        guard body.count <= Self.maxBodyBytes else {
            throw PushRequestError(outcome: "InvalidNotificationSize", reason: "the body is \(body.count) bytes; WNS takes at most \(Self.maxBodyBytes)")
        }
        guard !body.isEmpty else { throw PushRequestError(outcome: "PnsInterfaceError", reason: "WNS takes no empty notification") }
        var headers = [
            ("authorization", accessToken.bearer), ("x-wns-type", type),
            ("content-type", type == "wns/raw" ? "application/octet-stream" : "text/xml"),
        ]
        for name in Self.passedHeaders {
            if let value = message.headers[name] { headers.append((name, value)) }
        }
        // The notification's time to live, unless the send gave its own: WNS keeps it no longer.
        if message.headers["x-wns-ttl"] == nil {
            headers.append(("x-wns-ttl", String(max(1, Int(message.expiresAt.timeIntervalSince(now).rounded(.down))))))
        }
        return PushHTTPRequest(url: message.pushChannel, headers: headers, body: body)
    }

    /// WNS's word on the notification: `X-WNS-Status`, which some answers call `X-WNS-NotificationStatus`.
    static func status(_ response: PushHTTPResponse) -> String? {
        (response.headers["x-wns-status"] ?? response.headers["x-wns-notificationstatus"])?.lowercased()
    }

    /// The answer's reason, with what WNS said beside the status.
    func reason(_ response: PushHTTPResponse, _ base: String? = nil) -> String {
        var parts: [String] = base.map { [$0] } ?? []
        if let status = Self.status(response) { parts.append("status=\(status)") }
        if let device = response.headers["x-wns-deviceconnectionstatus"] { parts.append("device=\(device)") }
        if let id = response.headers["x-wns-msg-id"] { parts.append("msg=\(id)") }
        if let text = response.headers["x-wns-error-description"] { parts.append(text) }
        return response.describe(parts.isEmpty ? nil : parts.joined(separator: " "))
    }

    func said(_ response: PushHTTPResponse) -> [String] {
        var said: [String] = []
        if let status = Self.status(response) { said.append("X-WNS-Status: \(status)") }
        if let device = response.headers["x-wns-deviceconnectionstatus"] { said.append("X-WNS-DeviceConnectionStatus: \(device.lowercased())") }
        return said
    }

    /// Statuses as WNS documents them, named as Notification Hubs counts them: 404 BadChannel and
    /// 410 ExpiredChannel (the channel is gone), 406 or `channelthrottled` Throttled (sent again
    /// after Retry-After), 401 a token refused (fetched again once), 403 WrongToken (the channel
    /// belongs to another app than the credentials': a new token cannot help, so none is fetched
    /// and the channel is kept), 413 InvalidNotificationSize; a notification WNS took but dropped
    /// counts as Dropped, or as ChannelDisconnected when the device was not connected.
    func classify(_ response: PushHTTPResponse, now: Date) -> PushResult {
        let status = Self.status(response)
        if status == "channelthrottled" || response.status == 406 {
            return .retry(reason: reason(response, "Throttled"), after: response.retryAfter(now: now))
        }
        if response.status == 200 {
            guard status == "dropped" else { return .delivered }
            let disconnected = response.headers["x-wns-deviceconnectionstatus"]?.lowercased() == "disconnected"
            return .failed(outcome: disconnected ? "ChannelDisconnected" : "Dropped", reason: reason(response))
        }
        if let common = common(response, reason: status, now: now) {
            if case .failed(let outcome, _) = common { return .failed(outcome: outcome, reason: reason(response, "PayloadTooLarge")) }
            return common
        }
        switch response.status {
        case 401: return .renewCredentials(reason: reason(response, "InvalidToken"))
        case 403: return .failed(outcome: "WrongToken", reason: reason(response, "WrongToken"))
        case 404: return .channelExpired(reason: reason(response, "BadChannel"), outcome: "BadChannel")
        case 410: return .channelExpired(reason: reason(response, "ExpiredChannel"), outcome: "ExpiredChannel")
        default: return .failed(outcome: "PnsInterfaceError", reason: reason(response))
        }
    }

    func info(source: String) -> PushServiceInfo {
        var settings = ["tokenEndpoint": tokenEndpoint, "channelDomain": channelDomain]
        switch credentials {
        case .packageSid(let sid): settings["packageSid"] = sid
        case .entra(let tenant, let client):
            settings["tenantId"] = tenant
            settings["clientId"] = client
        }
        return PushServiceInfo(service: service.rawValue, platform: service.platform.rawValue, endpoint: tokenEndpoint, source: source, settings: settings)
    }
}

/// `application/x-www-form-urlencoded` bodies, and the encodings push services sign.
enum FormEncoding {
    /// RFC 3986's unreserved characters as they are, everything else percent-encoded (a space as %20).
    static func component(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)...Unicode.Scalar(127)))) ?? text
    }

    /// A form's fields, each name and value form-encoded (a space as `+`).
    static func body(_ pairs: [(String, String)]) -> String {
        pairs.map { SharedAccessSignature.urlEncode($0.0) + "=" + SharedAccessSignature.urlEncode($0.1) }.joined(separator: "&")
    }

    /// PHP's `urlencode`, which Baidu's signatures are made with: form encoding, `~` encoded too.
    static func php(_ text: String) -> String { SharedAccessSignature.urlEncode(text).replacingOccurrences(of: "~", with: "%7E") }
}
