import Foundation
import HubProtocol

/// Amazon Device Messaging. The security profile's client id and secret are traded at Login with
/// Amazon for an access token of scope `messaging:push`, kept until a minute before it expires.
/// Each delivery is one `POST /messaging/registrations/{registrationId}/messages` with the
/// message's `data` or `notification`, or both (and `priority`, `consolidationKey` where a send gives them),
/// and `expiresAfter` from the notification's time to live. An answer naming another registration
/// id (the canonical one) moves the installation's channel there.
final class ADMSender: PushSender {
    let service = PushService.adm
    let endpoint: String
    let tokenEndpoint: String
    private let clientId: String
    private let clientSecret: String
    /// An hour when the answer does not say.
    private let accessToken = AccessTokenKeeper(defaultLifetime: 3_600)
    /// ADM takes at most 6 KB of payload.
    static let maxPayloadBytes = 6_144
    /// ADM keeps a message for an offline device from a minute to 31 days.
    static let expiry = 60...2_678_400
    /// The members of a message the hub passes on.
    static let members: Set<String> = ["data", "notification", "priority", "consolidationKey", "expiresAfter", "md5"]

    init(_ settings: ADMSettings) throws(PushConfigurationError) {
        guard !settings.clientId.isEmpty, !settings.clientSecret.isEmpty else {
            throw PushConfigurationError("push.adm needs clientId and clientSecret: the security profile's, from the Amazon developer console")
        }
        clientId = settings.clientId
        clientSecret = settings.clientSecret
        endpoint = try httpsEndpoint(settings.endpoint ?? "https://api.amazon.com", setting: "push.adm.endpoint")
        tokenEndpoint = try httpsEndpoint(settings.tokenEndpoint ?? "https://api.amazon.com/auth/o2/token", setting: "push.adm.tokenEndpoint")
    }

    func authorization(now: Date) -> PushAuthorization {
        accessToken.authorization(now: now) {
            let form = [("grant_type", "client_credentials"), ("scope", "messaging:push"), ("client_id", clientId), ("client_secret", clientSecret)]
            return PushHTTPRequest(
                url: tokenEndpoint, headers: [("content-type", "application/x-www-form-urlencoded;charset=UTF-8")],
                body: Data(FormEncoding.body(form).utf8))
        }
    }

    func tokenAnswered(_ response: PushHTTPResponse, now: Date) -> String? { accessToken.answered(response, now: now) }

    func renew(now: Date) { accessToken.renew() }

    func request(for message: PushMessage, now: Date) throws(PushRequestError) -> PushHTTPRequest {
        guard !message.pushChannel.isEmpty else { throw PushRequestError(outcome: "BadChannel", reason: "the ADM registration id is empty") }
        guard var object = JSONValue.parse(message.payload)?.objectValue else {
            throw PushRequestError(outcome: "PnsInterfaceError", reason: "an adm payload is a JSON object with 'data' or 'notification'")
        }
        if let unknown = object.keys.sorted().first(where: { !Self.members.contains($0) }) {
            throw PushRequestError(outcome: "PnsInterfaceError", reason: "an adm message has no member '\(unknown)'")
        }
        // A data message (the app's own key-value pairs), a notification message (ADM's preset
        // ones, shown for the app), or both; either is an object of strings.
        let parts = ["data", "notification"].compactMap { name in object[name].map { (name, $0) } }
        guard !parts.isEmpty else {
            throw PushRequestError(outcome: "PnsInterfaceError", reason: "an adm message has 'data' or 'notification'")
        }
        var payloadBytes = 0
        for (name, part) in parts {
            guard let fields = part.objectValue, fields.values.allSatisfy({ $0.stringValue != nil }) else {
                throw PushRequestError(outcome: "PnsInterfaceError", reason: "an adm message's '\(name)' is an object of strings")
            }
            // Objects of strings always encode; the body is written in full below, where a failure is refused.
            payloadBytes += (try? part.encoded().count) ?? 0
        }
        // ADM's 6 KB is the payload's: the key-value pairs the device gets.
        guard payloadBytes <= Self.maxPayloadBytes else {
            throw PushRequestError(outcome: "InvalidNotificationSize", reason: "the payload is \(payloadBytes) bytes; ADM takes at most 6 KB")
        }
        if object["expiresAfter"] == nil {
            let seconds = Int(message.expiresAt.timeIntervalSince(now).rounded(.down))
            object["expiresAfter"] = .number(Double(min(max(seconds, Self.expiry.lowerBound), Self.expiry.upperBound)))
        }
        if object["consolidationKey"] == nil, let key = message.headers["x-amzn-consolidation-key"] { object["consolidationKey"] = .string(key) }
        // Refused just below, as a payload that cannot be written.
        guard let body = try? JSONValue.object(object).encoded() else {
            throw PushRequestError(outcome: "PnsInterfaceError", reason: "the adm payload cannot be written back as JSON")
        }
        let registration = FormEncoding.component(message.pushChannel)
        return PushHTTPRequest(
            url: "\(endpoint)/messaging/registrations/\(registration)/messages",
            headers: [
                ("authorization", accessToken.bearer), ("content-type", "application/json"), ("accept", "application/json"),
                ("x-amzn-type-version", "com.amazon.device.messaging.ADMMessage@1.0"),
                ("x-amzn-accept-type", "com.amazon.device.messaging.ADMSendResult@1.0"),
            ],
            body: body)
    }

    /// Amazon's reasons: a registration id it does not know (InvalidRegistrationId) is a BadChannel,
    /// one no longer registered (Unregistered) an ExpiredChannel; an expired token (401) is fetched
    /// again; MaxRateExceeded (429) waits for Retry-After; MessageTooLarge (413) is
    /// InvalidNotificationSize; the other refusals of a message are not sent again.
    func classify(_ response: PushHTTPResponse, now: Date) -> PushResult {
        let reason = response.json?["reason"]?.stringValue
        if response.status == 200 {
            if let canonical = response.json?["registrationID"]?.stringValue, !canonical.isEmpty, canonical != requestedChannel(response) {
                return .channelMoved(to: canonical)
            }
            return .delivered
        }
        if let common = common(response, reason: reason, now: now) { return common }
        switch (response.status, reason) {
        case (_, "InvalidRegistrationId"): return .channelExpired(reason: response.describe(reason), outcome: "BadChannel")
        case (_, "Unregistered"): return .channelExpired(reason: response.describe(reason), outcome: "ExpiredChannel")
        case (401, _): return .renewCredentials(reason: response.describe(reason ?? "AccessTokenExpired"))
        case (403, _): return .failed(outcome: "InvalidCredentials", reason: response.describe(reason))
        default: return .failed(outcome: "PnsInterfaceError", reason: response.describe(reason))
        }
    }

    /// The registration id a request went to, as its answer carries it back (`PushHTTPResponse.request`).
    private func requestedChannel(_ response: PushHTTPResponse) -> String? {
        guard let url = response.requestURL, let range = url.range(of: "/messaging/registrations/") else { return nil }
        let rest = url[range.upperBound...]
        guard let end = rest.range(of: "/messages") else { return nil }
        return String(rest[..<end.lowerBound]).removingPercentEncoding
    }

    func info(source: String) -> PushServiceInfo {
        PushServiceInfo(
            service: service.rawValue, platform: service.platform.rawValue, endpoint: endpoint, source: source,
            settings: ["clientId": clientId, "tokenEndpoint": tokenEndpoint])
    }
}
