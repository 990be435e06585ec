import Foundation
import HubProtocol

/// Whether a sender can make requests now.
enum PushAuthorization {
    case ready
    /// A token is being fetched; requests wait for it.
    case waiting
    /// This request fetches the token; its answer goes to `tokenAnswered`.
    case fetch(PushHTTPRequest)
}

/// One push service's protocol: how a delivery becomes a request, and what its answers mean.
/// Used on one thread (the dispatcher's loop).
protocol PushSender: AnyObject {
    var service: PushService { get }
    var endpoint: String { get }
    func authorization(now: Date) -> PushAuthorization
    /// The token endpoint's answer; nil when a token came, else what went wrong.
    func tokenAnswered(_ response: PushHTTPResponse, now: Date) -> String?
    /// Drops a token the service refused, so that the next request makes a new one.
    func renew(now: Date)
    func request(for message: PushMessage, now: Date) throws(PushRequestError) -> PushHTTPRequest
    func classify(_ response: PushHTTPResponse, now: Date) -> PushResult
    func info(source: String) -> PushServiceInfo
    /// What the service said of an answer beside its status, to count, such as `X-WNS-Status: received`.
    func said(_ response: PushHTTPResponse) -> [String]
}

extension PushSender {
    func authorization(now: Date) -> PushAuthorization { .ready }
    func tokenAnswered(_ response: PushHTTPResponse, now: Date) -> String? { nil }
    func said(_ response: PushHTTPResponse) -> [String] { [] }

    /// What every push service's throttles, server errors and silences mean.
    func common(_ response: PushHTTPResponse, reason: String?, now: Date) -> PushResult? {
        if response.status == 0 { return .retry(reason: response.describe(nil), after: nil) }
        if response.status == 429 { return .retry(reason: response.describe(reason ?? "TooManyRequests"), after: response.retryAfter(now: now)) }
        if response.status >= 500 { return .retry(reason: response.describe(reason), after: response.retryAfter(now: now)) }
        if response.status == 413 { return .failed(outcome: "InvalidNotificationSize", reason: response.describe(reason ?? "PayloadTooLarge")) }
        return nil
    }
}

/// An OAuth 2 access token a sender keeps for its service (FCM, WNS, ADM): fetched when there is
/// none, or it is within a minute of its end, one fetch at a time; dropped when the service refuses it.
final class AccessTokenKeeper {
    private(set) var token: String?
    private var expiresAt = Date.distantPast
    private var fetching = false
    /// Seconds a token lives when its answer does not say.
    let defaultLifetime: TimeInterval

    init(defaultLifetime: TimeInterval) { self.defaultLifetime = defaultLifetime }

    /// Ready with a token, waiting for the one being fetched, or the fetch `request` makes (nil:
    /// it cannot be made now, and the caller waits).
    func authorization(now: Date, request: () -> PushHTTPRequest?) -> PushAuthorization {
        if token != nil, expiresAt > now.addingTimeInterval(60) { return .ready }
        if fetching { return .waiting }
        guard let request = request() else { return .waiting }
        fetching = true
        return .fetch(request)
    }

    /// The token endpoint's answer: nil when a token came, else what went wrong. `expires_in` may
    /// be a number or a string (Entra writes it as one).
    func answered(_ response: PushHTTPResponse, now: Date) -> String? {
        fetching = false
        let object = response.json
        guard response.status == 200, let token = object?["access_token"]?.stringValue, !token.isEmpty else {
            let error = object?.objectValue.map { "\($0["error"]?.plainText ?? "") \($0["error_description"]?.plainText ?? "")" }
            return "the token endpoint answered \(response.describe(error))"
        }
        let given = object?["expires_in"]?.doubleValue ?? object?["expires_in"]?.stringValue.flatMap(Double.init)
        // A lifetime that is no number, or none a token has (a second to a week), is not believed.
        let lifetime = given.flatMap { $0.isFinite && $0 >= 1 && $0 <= 604_800 ? $0 : nil } ?? defaultLifetime
        self.token = token
        expiresAt = now.addingTimeInterval(lifetime)
        return nil
    }

    func renew() { token = nil }

    /// The Authorization header's value.
    var bearer: String { "Bearer \(token ?? "")" }
}

/// An https:// URL's text without a trailing slash, or a clear refusal.
func httpsEndpoint(_ text: String, setting: String) throws(PushConfigurationError) -> String {
    guard let url = URL(string: text), url.scheme?.lowercased() == "https", let host = url.host, !host.isEmpty else {
        throw PushConfigurationError("\(setting) '\(text)' must be an https:// URL")
    }
    return text.hasSuffix("/") ? String(text.dropLast()) : text
}

/// Settings that cannot be used, with what to fix.
public struct PushConfigurationError: Error, Equatable, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
