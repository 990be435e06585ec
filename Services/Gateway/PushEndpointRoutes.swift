import Auth
import Foundation
import HTTPServer
import HubProtocol
import Push
import ServiceKit

/// The push service side of UnifiedPush and Web Push (RFC 8030) at each app's endpoint,
/// `/up/{secret}`: an application server POSTs an encrypted message there, and it becomes a
/// durable delivery to the agent of the installation that registered it, which hands it to the
/// app. The secret is the capability: the hub keeps only its SHA-256, in the installation's
/// `endpoints`, and the registry finds the installation by it. The URL names no installation and
/// no hub, so two apps' endpoints on one device share nothing but the gateway's address.
struct PushEndpointRoutes {
    let services: GatewayServices
    /// Pushes per apps' endpoint, shared by every worker's routes.
    let pushRate: RateLimiter
    /// Counts each answer by status, shared by every worker's routes.
    let counts: HTTPCounts
    /// The most a push message may carry (UnifiedPush; the Web Push record size).
    static let pushMessageBytes = 4_096
    /// The longest a topic may be (RFC 8030 §5.4).
    static let pushTopicLength = 32

    /// Answers a request under `/up`; `segments` follow it.
    func handle(_ request: HTTPRequest, _ segments: [String]) -> HTTPResponse {
        let response: HTTPResponse
        do {
            response = try routePush(request, segments)
        } catch let refusal as PushRefusal {
            response = refusal.response
        } catch let error as HubError {
            // The hub's own refusals (the publish service's, a service that did not answer) keep their status.
            response = PushRefusal(GatewayResponse.status(for: error.code), error.code.rawValue, error.message).response
        } catch {
            response = PushRefusal(500, ErrorCode.internal.rawValue, "\(error)").response
        }
        counts.add(push: response.status)
        return response
    }

    private func routePush(_ request: HTTPRequest, _ segments: [String]) throws -> HTTPResponse {
        if segments.isEmpty, request.method == "GET" { return Self.discovery }
        let target = try self.target(segments)
        switch request.method {
        case "GET":
            _ = try target.endpoint()
            return Self.discovery
        case "POST":
            return try push(request, target)
        default:
            throw PushRefusal(405, "invalid_argument", "a push endpoint takes POST (a message) and GET (discovery), not \(request.method)")
        }
    }

    /// The endpoint the path after `/up/` names; sets the worker's hub to its hub.
    func target(_ segments: [String]) throws -> PushTarget {
        switch segments.count {
        case 1: return try holder(ofSecret: segments[0])
        case 2, 3: return try named(segments)
        default: throw PushRefusal(404, "not_found", "a push endpoint is /up/{secret}, as its app was given it")
        }
    }

    /// `/up/{secret}`: the registry finds the installation that holds the secret's hash, of
    /// whichever hub, so that the URL names neither (an app's endpoint links it to no other app).
    private func holder(ofSecret secret: String) throws -> PushTarget {
        let endpointId = PushEndpointSecret.id(of: secret)
        services.current.set(services.context.config.hub, services.context.scope(nil))
        let installation: Installation
        do {
            installation = try services.registry.call(InstallationByEndpoint(endpoint: endpointId)).installation
        } catch let error as HubError where error.code == .notFound {
            throw PushRefusal.gone
        }
        // The hub by its name, in its current generation: an installation of a generation deleted is gone.
        let keyed = HubScope.of(key: installation.installationId)
        let scope = services.context.scope(keyed.isDefault ? nil : keyed.name)
        guard scope == keyed, services.context.hubs.has(scope) else {
            // The registry deletes a hub's installations with it, so one it holds is of a hub that
            // is there: this gateway has not read the catalog since the hub was made. Not 410, which
            // would have the application server drop the endpoint for good.
            throw PushRefusal(
                503, ErrorCode.unavailable.rawValue, "this endpoint's hub is newer than this gateway's list of hubs; retry in a second")
        }
        services.current.set(scope.isDefault ? services.context.config.hub : scope.name, scope)
        return PushTarget(installationId: scope.id(installation.installationId), endpointId: endpointId, found: installation)
    }

    /// `/up/{installation}/{secret}`, as endpoints were given before they stopped naming their
    /// installation: the installation by its key among every hub's, `hub%2Fid` (which may reach
    /// here decoded, as two segments) for a hub other than the default.
    private func named(_ segments: [String]) throws -> PushTarget {
        let key = segments.dropLast().joined(separator: "/")
        // The key names its hub by name (the agent knows no generation); the catalog has the hub's generation.
        let named = HubScope.hub(ofKey: key).map(String.init)
        let scope = services.context.scope(named)
        guard services.context.hubs.has(scope) else {
            throw PushRefusal(410, ErrorCode.notFound.rawValue, "this push endpoint's hub is gone; its app must register again for a new one")
        }
        services.current.set(scope.isDefault ? services.context.config.hub : scope.name, scope)
        let installationId = HubScope(named: named).id(key)
        let registry = services.registry
        return PushTarget(installationId: installationId, endpointId: PushEndpointSecret.id(of: segments[segments.count - 1])) {
            do {
                return try registry.call(InstallationGet(installationId: installationId)).installation
            } catch let error as HubError where error.code == .notFound || error.code == .invalidArgument {
                return nil
            }
        }
    }

    /// `{"unifiedpush":{"version":1}}`: what a UnifiedPush gateway looks for to know the server.
    static let discovery = GatewayResponse.json(200, Data(#"{"unifiedpush":{"version":1}}"#.utf8))

    private func push(_ request: HTTPRequest, _ target: PushTarget) throws -> HTTPResponse {
        guard !request.bodyTooLarge, request.body.count <= Self.pushMessageBytes else {
            throw PushRefusal(413, ErrorCode.payloadTooLarge.rawValue, "a push message carries at most \(Self.pushMessageBytes) bytes; this one has more")
        }
        guard !request.body.isEmpty else {
            throw PushRefusal(400, ErrorCode.invalidPayload.rawValue, "a push message carries 1 to \(Self.pushMessageBytes) bytes, encrypted for the app (RFC 8291); this one is empty")
        }
        // The older draft's aesgcm keeps its salt and key in the Encryption and Crypto-Key headers,
        // which the app's D-Bus Message does not carry: the app could not read what it got.
        if let encoding = request.header("content-encoding"), encoding.trimmingCharacters(in: .whitespaces).lowercased() == "aesgcm" {
            throw PushRefusal(
                415, ErrorCode.invalidArgument.rawValue,
                "Content-Encoding aesgcm keeps its keys in HTTP headers the app is never given; encrypt with aes128gcm (RFC 8291), as current Web Push libraries do")
        }
        let timeToLive = try Self.timeToLive(request.header("ttl"), default: services.context.config.defaultTimeToLive)
        var urgency: PushUrgency?
        if let text = request.header("urgency") {
            guard let value = PushUrgency(rawValue: text.trimmingCharacters(in: .whitespaces).lowercased()) else {
                throw PushRefusal(400, ErrorCode.invalidArgument.rawValue, "Urgency '\(text.prefix(20))' is not one of very-low, low, normal, high")
            }
            urgency = value
        }
        let topic = try request.header("topic").map(Self.checkTopic)
        try take(target)
        if let key = try target.endpoint().vapid {
            do {
                try VAPID.verify(
                    authorization: request.header("authorization"), cryptoKey: request.header("crypto-key"), registered: key,
                    audiences: audiences(request))
            } catch {
                throw PushRefusal(error.status, error.status == 403 ? ErrorCode.forbidden.rawValue : ErrorCode.unauthorized.rawValue, error.message)
            }
        }
        let accepted = try enqueue(request.body, to: target, timeToLive: timeToLive, urgency: urgency, topic: topic)
        return GatewayResponse.empty(201, headers: [
            ("Location", "\(services.context.resource(of: services.current.scope))/messages/\(accepted.notificationId)"), ("TTL", String(timeToLive)),
        ])
    }

    /// Takes one push of the endpoint's rate, or refuses it (429).
    func take(_ target: PushTarget) throws {
        guard pushRate.allow(target.endpointId) else {
            throw PushRefusal(
                429, ErrorCode.rateLimited.rawValue,
                "this endpoint takes \(services.context.config.limits.pushesPerSecondPerEndpoint) pushes a second (limits.pushesPerSecondPerEndpoint); retry after a second",
                retryAfter: 1)
        }
    }

    /// Stores `message` as a delivery to the endpoint's installation, for its app: durable once this returns.
    func enqueue(_ message: Data, to target: PushTarget, timeToLive: Int, urgency: PushUrgency?, topic: String?) throws -> SendAccepted {
        let push = AppPushMessage(endpoint: target.endpointId, message: message, urgency: urgency, topic: topic)
        var send = SendNotification(format: .native, body: push.payload, installationId: target.installationId, timeToLive: timeToLive)
        if let topic { send.headers = [AppPushMessage.topicHeader: "\(target.endpointId):\(topic)"] }
        return try services.publish.call(send)
    }

    /// The origins a VAPID token may be for: the namespace's, and the one the request came to.
    private func audiences(_ request: HTTPRequest) -> [String] {
        [VAPID.origin(of: services.context.config.namespace), VAPID.origin(of: services.baseURL(request))].compactMap { $0 }
    }

    /// Seconds to keep the message, from `TTL`: 0 keeps it a second (for an agent connected now),
    /// and the hub keeps it at most 30 days. Absent, the hub's default.
    static func timeToLive(_ header: String?, default fallback: Int) throws -> Int {
        guard let header else { return fallback }
        guard let seconds = Int(header.trimmingCharacters(in: .whitespaces)), seconds >= 0 else {
            throw PushRefusal(400, ErrorCode.invalidArgument.rawValue, "TTL must be whole seconds, 0 or more, not '\(header.prefix(20))'")
        }
        return min(max(seconds, 1), 30 * 86_400)
    }

    /// A topic is at most 32 characters of the base64url alphabet (RFC 8030 §5.4).
    static func checkTopic(_ topic: String) throws -> String {
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        guard !topic.isEmpty, topic.utf8.count <= pushTopicLength, topic.utf8.allSatisfy(allowed.contains) else {
            throw PushRefusal(400, ErrorCode.invalidArgument.rawValue, "Topic must be 1 to \(pushTopicLength) characters of A–Z a–z 0–9 - _")
        }
        return topic
    }
}

/// The installation a push endpoint's URL reaches, and the endpoint's id.
struct PushTarget {
    let installationId: String
    let endpointId: String
    /// The installation as read, or how to read it (nil when there is none).
    private let read: () throws -> Installation?

    init(installationId: String, endpointId: String, found: Installation) {
        self.init(installationId: installationId, endpointId: endpointId) { found }
    }

    init(installationId: String, endpointId: String, read: @escaping () throws -> Installation?) {
        self.installationId = installationId
        self.endpointId = endpointId
        self.read = read
    }

    /// The endpoint as registered, or 410: an endpoint unregistered, of an installation deleted,
    /// or never given out, so that the application server drops it.
    func endpoint() throws -> PushEndpoint {
        guard let installation = try read(), installation.platform == Platform.linux.rawValue, let endpoint = installation.endpoints?[endpointId] else {
            throw PushRefusal.gone
        }
        return endpoint
    }
}

/// A push endpoint's refusal, as JSON: `{"code":410,"error":"not_found","message":"…"}`.
struct PushRefusal: Error {
    let status: Int
    let code: String
    let message: String
    var retryAfter: Int?

    init(_ status: Int, _ code: String, _ message: String, retryAfter: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter ?? ([429, 503].contains(status) ? 1 : nil)
    }

    /// An endpoint unregistered, of an installation deleted, or never given out.
    static let gone = PushRefusal(410, ErrorCode.notFound.rawValue, "this push endpoint is not registered (any more); its app must register again for a new one")

    var response: HTTPResponse {
        let body = HubCodec.encodeValue(["code": .integer(Int64(status)), "error": .string(code), "message": .string(message)] as JSONValue)
        return GatewayResponse.json(status, body, headers: retryAfter.map { [("Retry-After", String($0))] } ?? [])
    }
}
