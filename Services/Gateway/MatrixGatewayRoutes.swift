import Foundation
import HTTPServer
import HubProtocol
import ServiceKit

/// A Matrix push gateway (the Matrix Push Gateway API, `POST /_matrix/push/v1/notify`) in front of
/// the apps' UnifiedPush endpoints, as UnifiedPush distributors serve one: a Matrix client that
/// registers with the agent sets a pusher on its homeserver whose gateway is this one and whose
/// `pushkey` is its endpoint. The homeserver posts each notification here, and it goes to the
/// endpoint as a push message whose bytes are the notification request as posted, the JSON the
/// Matrix client reads (Matrix sends it unencrypted; the homeserver already holds it).
///
/// - A pushkey that is not an endpoint of this gateway, or whose app is gone, is answered in
///   `rejected`, so that the homeserver removes the pusher.
/// - A notification for several devices goes to each with `devices` narrowed to that one.
/// - A request over a push message's 4,096 bytes goes without its event's `content` and names
///   (`event_id_only`, as the homeserver's own setting sends it): the client fetches the event.
/// - `prio` `low` is Urgency `low`; a call invitation is `high`; anything else `normal`.
/// - An endpoint whose app asked for VAPID is rejected: the gateway holds no key of its server.
struct MatrixGatewayRoutes {
    let pushEndpoints: PushEndpointRoutes
    var services: GatewayServices { pushEndpoints.services }

    static let path = ["_matrix", "push", "v1", "notify"]
    /// `{"unifiedpush":{"gateway":"matrix"}}`: what a Matrix client looks for to know the gateway is there.
    static let discovery = GatewayResponse.json(200, Data(#"{"unifiedpush":{"gateway":"matrix"}}"#.utf8))

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        switch request.method {
        case "GET": return Self.discovery
        case "POST": break
        default: return Self.error(405, "M_UNRECOGNIZED", "the push gateway takes POST (a notification) and GET (discovery), not \(request.method)")
        }
        guard !request.bodyTooLarge else { return Self.error(413, "M_TOO_LARGE", "the notification is too large") }
        let notification: [String: Any]
        do {
            guard let body = try JSONSerialization.jsonObject(with: request.body) as? [String: Any] else {
                return Self.error(400, "M_BAD_JSON", "the body is {\"notification\": {…, \"devices\": [{\"pushkey\": …}]}}")
            }
            guard let found = body["notification"] as? [String: Any] else {
                return Self.error(400, "M_BAD_JSON", "the body has no 'notification' object")
            }
            notification = found
        } catch {
            return Self.error(400, "M_NOT_JSON", "the body is not JSON")
        }
        guard let devices = notification["devices"] as? [[String: Any]], !devices.isEmpty,
            devices.allSatisfy({ ($0["pushkey"] as? String)?.isEmpty == false })
        else {
            return Self.error(400, "M_BAD_JSON", "notification.devices must list one or more devices, each with its pushkey")
        }
        var rejected: [String] = []
        for device in devices {
            let pushkey = device["pushkey"] as? String ?? ""
            do {
                if try !forward(request, notification, to: device, devices: devices.count) { rejected.append(pushkey) }
            } catch let refusal as PushRefusal where refusal.status == 429 {
                return Self.error(429, "M_LIMIT_EXCEEDED", refusal.message, retryAfter: refusal.retryAfter)
            } catch let refusal as PushRefusal where refusal.status == 503 {
                // Not rejected: the homeserver would remove the pusher. It tries again.
                return Self.error(503, "M_UNKNOWN", refusal.message, retryAfter: refusal.retryAfter)
            } catch let refusal as PushRefusal {
                services.context.logger.debug("a Matrix pushkey is rejected", ("status", String(refusal.status)), ("reason", refusal.message))
                rejected.append(pushkey)
            } catch let error as HubError {
                // The hub could not take it now (a service away): the homeserver tries again.
                return Self.error(GatewayResponse.status(for: error.code), "M_UNKNOWN", error.message)
            } catch {
                return Self.error(500, "M_UNKNOWN", "\(error)")
            }
        }
        let answer = (try? JSONSerialization.data(withJSONObject: ["rejected": rejected])) ?? Data(#"{"rejected":[]}"#.utf8)
        return GatewayResponse.json(200, answer)
    }

    /// Stores the notification for one device's endpoint; false when its pushkey is not an
    /// endpoint of this gateway.
    private func forward(_ request: HTTPRequest, _ notification: [String: Any], to device: [String: Any], devices: Int) throws -> Bool {
        guard let segments = endpointSegments(device["pushkey"] as? String ?? "", request) else { return false }
        let target = try pushEndpoints.target(segments)
        if try target.endpoint().vapid != nil {
            throw PushRefusal(403, ErrorCode.forbidden.rawValue, "this endpoint's app asked for VAPID, which the Matrix gateway cannot sign")
        }
        try pushEndpoints.take(target)
        let message = try Self.message(request.body, notification, device: device, alone: devices == 1)
        _ = try pushEndpoints.enqueue(
            message, to: target, timeToLive: services.context.config.defaultTimeToLive, urgency: Self.urgency(of: notification), topic: nil)
        return true
    }

    /// The path after `/up/` when `pushkey` is an endpoint this gateway gave out: the agent's
    /// endpoints start with the namespace's address, and a request may reach the gateway by another.
    private func endpointSegments(_ pushkey: String, _ request: HTTPRequest) -> [String]? {
        let namespace = services.context.config.namespace
        let bases = [(namespace.hasSuffix("/") ? namespace : namespace + "/") + "up/", services.baseURL(request) + "/up/"]
        guard let base = bases.first(where: { pushkey.hasPrefix($0) }) else { return nil }
        let rest = pushkey.dropFirst(base.count).split(separator: "?").first ?? ""
        let segments = rest.split(separator: "/").map { $0.removingPercentEncoding ?? String($0) }
        return segments.isEmpty ? nil : segments
    }

    /// The bytes the app gets: the request as posted when it is for this device alone and fits a
    /// push message; otherwise the notification for this device, without its content if need be.
    static func message(_ body: Data, _ notification: [String: Any], device: [String: Any], alone: Bool) throws -> Data {
        if alone, body.count <= PushEndpointRoutes.pushMessageBytes { return body }
        var narrowed = notification
        narrowed["devices"] = [device]
        var data = try JSONSerialization.data(withJSONObject: ["notification": narrowed], options: [.sortedKeys, .withoutEscapingSlashes])
        if data.count > PushEndpointRoutes.pushMessageBytes {
            for field in ["content", "sender_display_name", "room_name", "room_alias"] { narrowed[field] = nil }
            data = try JSONSerialization.data(withJSONObject: ["notification": narrowed], options: [.sortedKeys, .withoutEscapingSlashes])
        }
        guard data.count <= PushEndpointRoutes.pushMessageBytes else {
            throw PushRefusal(413, ErrorCode.payloadTooLarge.rawValue, "the notification is over \(PushEndpointRoutes.pushMessageBytes) bytes even without its content")
        }
        return data
    }

    /// `prio` `low` is low; a call invitation is high (RFC 8030's example of it); the rest normal.
    static func urgency(of notification: [String: Any]) -> PushUrgency {
        if (notification["type"] as? String) == "m.call.invite" { return .high }
        return (notification["prio"] as? String) == "low" ? .low : .normal
    }

    /// The Matrix API's error shape, `{"errcode": "M_…", "error": "…"}`.
    static func error(_ status: Int, _ code: String, _ message: String, retryAfter: Int? = nil) -> HTTPResponse {
        let body = (try? JSONSerialization.data(withJSONObject: ["errcode": code, "error": message])) ?? Data()
        return GatewayResponse.json(status, body, headers: retryAfter.map { [("Retry-After", String($0))] } ?? [])
    }
}
