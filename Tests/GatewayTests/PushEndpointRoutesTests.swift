import Auth
import Foundation
import HTTPServer
import HubProtocol
import Push
import ServiceKit
import Testing

@testable import NHGateway

/// The push server side of UnifiedPush and Web Push, in process: `/up/{secret}` (and the earlier
/// `/up/{installation}/{secret}`) against a stand-in registry (the installation and its endpoints)
/// and publish service; and the Matrix push gateway in front of them.
@Suite("Push endpoints, in process")
struct PushEndpointRoutesTests {
    static let secret = PushEndpointSecret.make()
    static let signed = PushEndpointSecret.make()
    /// An endpoint of an installation of a hub this gateway has not read of yet.
    static let newHub = PushEndpointSecret.make()
    let vapidKey = P256Key.generate()
    let routes: GatewayRouter
    let registry = StandIn(), publish = StandIn()
    let counts = HTTPCounts()

    init() throws {
        var config = HubConfig()
        config.dataDir = FileManager.default.temporaryDirectory.appendingPathComponent("nh-push-endpoint-tests-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: config.dataDir, withIntermediateDirectories: true)
        let context = try ServiceContext.detached(name: "nh-gateway", config: config)
        let web = WebPages(folder: URL(fileURLWithPath: config.dataDir).appendingPathComponent("no-pages"), hub: config.hub)
        routes = GatewayRouter(
            context: context, registry: registry, publish: publish, dispatch: StandIn(), sync: StandIn(), counts: counts, web: web,
            streams: nil, pushRate: RateLimiter(perSecond: 1, burst: 3))
        let installation = Installation(
            installationId: "dev-1", pushChannel: "key", endpoints: [
                PushEndpointSecret.id(of: Self.secret): PushEndpoint(),
                PushEndpointSecret.id(of: Self.signed): PushEndpoint(vapid: vapidKey.publicPoint.base64URL),
            ])
        registry.on(InstallationGet.self) { request, _ in
            guard request.installationId == "dev-1" else { throw HubError(.notFound, "no installation") }
            return InstallationReply(installation: installation)
        }
        var ofNewHub = installation
        ofNewHub.installationId = "new-hub/dev-2"
        ofNewHub.endpoints = [PushEndpointSecret.id(of: Self.newHub): PushEndpoint()]
        registry.on(InstallationByEndpoint.self) { [ofNewHub] request, _ in
            if ofNewHub.endpoints?[request.endpoint] != nil { return InstallationReply(installation: ofNewHub) }
            guard installation.endpoints?[request.endpoint] != nil else { throw HubError(.notFound, "no installation holds it") }
            return InstallationReply(installation: installation)
        }
        publish.on(SendNotification.self) { _, _ in SendAccepted(notificationId: "n-\(UUID().uuidString.prefix(4))", state: .enqueued) }
    }

    func post(_ path: String, _ body: Data = Data("hello".utf8), headers: [String: String] = ["ttl": "60"], tooLarge: Bool = false) -> HTTPResponse {
        routes.handle(HTTPRequest(method: "POST", path: path, headers: headers.merging(["host": "127.0.0.1:7780"]) { a, _ in a },
                                  body: body, bodyTooLarge: tooLarge))
    }

    func error(_ response: HTTPResponse) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: response.body) as? [String: Any]) ?? [:]
    }

    @Test("a push becomes a durable direct send to the installation: the bytes, TTL, Urgency and Topic; 201 with Location and TTL")
    func accepted() throws {
        let bytes = Data((0..<255).map { UInt8($0) })
        let response = post("/up/dev-1/\(Self.secret)", bytes, headers: ["ttl": "0", "urgency": "High", "topic": "score_1-2"])
        #expect(response.status == 201)
        #expect(response.header("TTL") == "1")
        #expect(response.header("Location")?.hasPrefix("http://127.0.0.1:7780/hub/messages/n-") == true)
        let send = try #require(publish.requests(SendNotification.self).first)
        #expect(send.installationId == "dev-1" && send.format == .native && send.platform == nil && send.timeToLive == 1)
        let message = try #require(AppPushMessage.from(payload: send.body ?? ""))
        #expect(message.bytes == bytes && message.urgency == .high && message.topic == "score_1-2")
        #expect(message.endpoint == PushEndpointSecret.id(of: Self.secret))
        #expect(send.headers == [AppPushMessage.topicHeader: "\(message.endpoint):score_1-2"])

        #expect(post("/up/dev-1/\(Self.secret)", headers: ["ttl": "99999999"]).header("TTL") == String(30 * 86_400))
        #expect(post("/up/dev-1/\(Self.secret)", headers: [:]).header("TTL") == String(HubConfig().defaultTimeToLive))
        let discovery = routes.handle(HTTPRequest(method: "GET", path: "/up/dev-1/\(Self.secret)"))
        #expect(discovery.status == 200 && discovery.text == #"{"unifiedpush":{"version":1}}"#)
    }

    @Test("unknown endpoints are 410, a malformed path 404; bad size, TTL, Urgency and Topic are 400 or 413 with what to fix")
    func refusals() throws {
        #expect(post("/up/dev-1/\(PushEndpointSecret.make())").status == 410)
        #expect(post("/up/nobody/\(Self.secret)").status == 410)
        #expect(routes.handle(HTTPRequest(method: "GET", path: "/up/dev-1/unknown")).status == 410)
        #expect(post("/up/\(PushEndpointSecret.make())").status == 410)
        #expect(post("/up/a/b/c/d").status == 404)
        #expect(routes.handle(HTTPRequest(method: "DELETE", path: "/up/dev-1/\(Self.secret)")).status == 405)
        let big = post("/up/dev-1/\(Self.secret)", Data(count: 4_097))
        #expect(big.status == 413 && error(big)["error"] as? String == "payload_too_large")
        #expect(post("/up/dev-1/\(Self.secret)", Data(count: 10), tooLarge: true).status == 413)
        #expect(post("/up/dev-1/\(Self.secret)", Data()).status == 400)
        let draft = post("/up/dev-1/\(Self.secret)", headers: ["ttl": "60", "content-encoding": "aesgcm"])
        #expect(draft.status == 415 && (error(draft)["message"] as? String)?.contains("aes128gcm") == true)
        for (headers, what) in [(["ttl": "-1"], "TTL"), (["urgency": "now"], "Urgency"), (["topic": "has space"], "Topic"),
                                (["topic": String(repeating: "a", count: 33)], "Topic")] {
            let refused = post("/up/dev-1/\(Self.secret)", headers: headers)
            #expect(refused.status == 400 && (error(refused)["message"] as? String)?.contains(what) == true, "\(headers)")
        }
        #expect(publish.calls.isEmpty)
    }

    @Test("an endpoint of the secret alone reaches the installation the registry finds by its hash")
    func secretAlone() throws {
        let response = post("/up/\(Self.secret)", Data("by secret".utf8))
        #expect(response.status == 201)
        #expect(response.header("Location")?.hasPrefix("http://127.0.0.1:7780/hub/messages/n-") == true)
        let send = try #require(publish.requests(SendNotification.self).first)
        #expect(send.installationId == "dev-1")
        #expect(AppPushMessage.from(payload: send.body ?? "")?.bytes == Data("by secret".utf8))
        #expect(registry.requests(InstallationByEndpoint.self).map(\.endpoint) == [PushEndpointSecret.id(of: Self.secret)])
        #expect(registry.requests(InstallationGet.self).isEmpty)
        #expect(post("/up/\(Self.signed)").status == 401)
        // A hub the gateway's catalog does not hold yet: try again, never gone.
        let newer = post("/up/\(Self.newHub)")
        #expect(newer.status == 503 && newer.header("Retry-After") == "1")
    }

    @Test("the Matrix push gateway: each device's pushkey an endpoint here gets the notification; others are rejected")
    func matrix() throws {
        func notify(_ body: Data) -> HTTPResponse {
            routes.handle(HTTPRequest(method: "POST", path: "/_matrix/push/v1/notify", headers: ["host": "127.0.0.1:7780"], body: body))
        }
        func json(_ value: Any) throws -> Data { try JSONSerialization.data(withJSONObject: value) }
        let mine = "http://127.0.0.1:7780/up/\(Self.secret)"
        let signed = "http://127.0.0.1:7780/up/\(Self.signed)"
        let strangers = ["https://elsewhere.example/up/\(Self.secret)", "http://127.0.0.1:7780/up/\(PushEndpointSecret.make())"]
        let body = try json(["notification": ["event_id": "$e", "prio": "low", "devices": [["pushkey": mine]]]])
        let answer = notify(body)
        #expect(answer.status == 200 && answer.text == #"{"rejected":[]}"#)
        let send = try #require(publish.requests(SendNotification.self).first)
        let message = try #require(AppPushMessage.from(payload: send.body ?? ""))
        #expect(message.bytes == body && message.urgency == .low && send.installationId == "dev-1")
        // Several devices: each alone in what it gets; pushkeys not endpoints here, or of an app
        // that asked for VAPID, rejected.
        let many = try json(["notification": ["type": "m.call.invite", "devices": ([mine, signed] + strangers).map { ["pushkey": $0] }]])
        let rejected = try #require(try JSONSerialization.jsonObject(with: notify(many).body) as? [String: [String]])["rejected"]
        #expect(Set(rejected ?? []) == Set([signed] + strangers))
        let second = try #require(AppPushMessage.from(payload: publish.requests(SendNotification.self).last?.body ?? ""))
        let narrowed = try #require(try JSONSerialization.jsonObject(with: second.bytes ?? Data()) as? [String: [String: Any]])
        #expect((narrowed["notification"]?["devices"] as? [[String: String]]) == [["pushkey": mine]] && second.urgency == .high)
        #expect(publish.calls.count == 2)
        let later = notify(try json(["notification": ["devices": [["pushkey": "http://127.0.0.1:7780/up/\(Self.newHub)"]]]]))
        #expect(later.status == 503, "the homeserver tries again; a rejection would remove its pusher")
        for bad in ["not json", "[]", #"{"notification":{"devices":[{"app_id":"a"}]}}"#] {
            #expect(notify(Data(bad.utf8)).status == 400)
        }
        let discovery = routes.handle(HTTPRequest(method: "GET", path: "/_matrix/push/v1/notify"))
        #expect(discovery.text == #"{"unifiedpush":{"gateway":"matrix"}}"#)
    }

    @Test("an endpoint with a VAPID key takes only pushes signed with it")
    func vapid() throws {
        let path = "/up/dev-1/\(Self.signed)"
        #expect(post(path).status == 401)
        let good = try VAPID.authorization(origin: "http://127.0.0.1:7780", subject: "mailto:a@b.c", key: vapidKey)
        #expect(post(path, headers: ["ttl": "60", "authorization": good]).status == 201)
        let stranger = try VAPID.authorization(origin: "http://127.0.0.1:7780", subject: "mailto:a@b.c", key: P256Key.generate())
        #expect(post(path, headers: ["ttl": "60", "authorization": stranger]).status == 403)
        #expect(publish.calls.count == 1)
    }

    @Test("each endpoint has its own rate: beyond it, 429 with Retry-After, and others still pass; /metrics counts by status")
    func rate() throws {
        let statuses = (0..<5).map { _ in post("/up/dev-1/\(Self.secret)").status }
        #expect(statuses.prefix(3).allSatisfy { $0 == 201 } && statuses.suffix(2).allSatisfy { $0 == 429 })
        let limited = post("/up/dev-1/\(Self.secret)")
        #expect(limited.status == 429 && limited.header("Retry-After") == "1")
        #expect(post("/up/dev-1/\(PushEndpointSecret.make())").status == 410)
        #expect(counts.pushSnapshot[201] == 3 && counts.pushSnapshot[429] == 3 && counts.pushSnapshot[410] == 1)
    }
}
