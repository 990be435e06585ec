import Auth
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit
import Testing

@testable import NHGateway

/// A service's stand-in: answers each request type with a closure, and records what it was asked.
final class StandIn: ServiceCalling, @unchecked Sendable {
    private var handlers: [String: (Any, String?) throws -> Any] = [:]
    private(set) var calls: [(type: String, request: Any, auth: String?)] = []

    func on<R: HubRequest>(_ type: R.Type, _ answer: @escaping (R, String?) throws -> R.Reply) {
        handlers[R.messageType.rawValue] = { request, auth in try answer(request as! R, auth) }
    }

    func call<R: HubRequest>(_ request: R, auth: String?) throws -> R.Reply {
        calls.append((R.messageType.rawValue, request, auth))
        guard let handler = handlers[R.messageType.rawValue] else {
            throw HubError(.unknownType, "the stand-in does not answer \(R.messageType)")
        }
        return try handler(request, auth) as! R.Reply
    }

    func requests<R: HubRequest>(_ type: R.Type) -> [R] { calls.compactMap { $0.request as? R } }
}

/// The gateway's routes in process, without sockets: each request goes through the route table,
/// the checks and the handlers, and the services are stand-ins.
struct Gateway {
    let routes: GatewayRouter
    let registry = StandIn(), publish = StandIn(), dispatch = StandIn(), sync = StandIn()
    let context: ServiceContext
    var keys: KeyStore { context.keys }
    static let host = "127.0.0.1:7780"
    /// A key with Send alone, beside the two default keys.
    static let sendName = "SendOnly"

    init() throws {
        var config = HubConfig()
        config.dataDir = FileManager.default.temporaryDirectory.appendingPathComponent("nh-gateway-tests-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: config.dataDir, withIntermediateDirectories: true)
        // Where nothing listens, so that a request that asks every service (health, metrics) reaches no hub running here.
        let nowhere = "ipc://\(config.dataDir)/nowhere.sock"
        (config.registry.requests, config.sync.requests, config.dispatch.requests, config.publish.requests) = (nowhere, nowhere, nowhere, nowhere)
        struct KeyFile: Encodable { let keys: [AccessKey] }
        let keys = [
            AccessKey.generate(name: AccessKey.defaultListenName, rights: .listen), AccessKey.generate(name: Self.sendName, rights: .send),
            AccessKey.generate(name: AccessKey.defaultFullName, rights: .all),
        ]
        try JSONEncoder().encode(KeyFile(keys: keys)).write(to: URL(fileURLWithPath: config.dataDir).appendingPathComponent(KeyStore.fileName))
        context = try ServiceContext.detached(name: "nh-gateway", config: config)
        let web = WebPages(folder: URL(fileURLWithPath: config.dataDir).appendingPathComponent("no-pages"), hub: config.hub)
        routes = GatewayRouter(
            context: context, registry: registry, publish: publish, dispatch: dispatch, sync: sync, counts: HTTPCounts(), web: web,
            streams: nil)
    }

    func token(_ name: String = AccessKey.defaultFullName, resource: String = "http://\(Self.host)/hub", lifetime: Int = 600) -> String {
        let key = keys.key(named: name)!
        return SharedAccessSignature.sign(resource: resource, keyName: key.name, key: key.key, expiry: Int(Date().timeIntervalSince1970) + lifetime)
    }

    func request(
        _ method: String, _ path: String, query: [String: String] = ["api-version": "2015-01"], headers: [String: String] = [:],
        body: String = "", key: String? = AccessKey.defaultFullName
    ) -> HTTPResponse {
        var all = ["host": Self.host]
        if let key { all["authorization"] = token(key) }
        for (name, value) in headers { all[name.lowercased()] = value }
        return routes.handle(HTTPRequest(
            method: method, path: path, headers: all, query: query, body: Data(body.utf8), bodyTooLarge: false, isTLS: false))
    }
}

extension HTTPResponse {
    var text: String { String(decoding: body, as: UTF8.self) }
    func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
}

@Suite("Gateway routes, in process")
struct GatewayRoutesTests {
    static let installation = Installation(installationId: "dev-1", platform: "apns", pushChannel: "AABB", tags: ["World"])

    @Test("every route in the table is reached by its method and path, and only by them")
    func table() {
        for route in RouteTable.routes {
            let segments = route.pattern.map { $0 == "{}" ? "x-1" : $0 }
            guard case .found(let found, let parameters) = RouteTable.match(route.method, segments) else {
                Issue.record("\(route.method) \(route.pattern) is not reached")
                continue
            }
            #expect(found.pattern == route.pattern && found.method == route.method)
            #expect(parameters.count == route.pattern.filter { $0 == "{}" }.count)
        }
        guard case .wrongMethod = RouteTable.match("PUT", ["messages"]) else { Issue.record("PUT messages"); return }
        guard case .none = RouteTable.match("GET", ["nothing"]) else { Issue.record("GET nothing"); return }
        guard case .found(_, let id) = RouteTable.match("POST", ["RegistrationIds"]), id.isEmpty else { Issue.record("case"); return }
    }

    @Test("a path, method, version or signature that does not fit gets its status and code")
    func refusals() throws {
        let gateway = try Gateway()
        #expect(gateway.request("PUT", "/hub/messages").status == 400)
        #expect(gateway.request("GET", "/hub/nothing").status == 404)
        #expect(gateway.request("GET", "/other/installations/x").status == 404)
        #expect(gateway.request("GET", "/hub/installations/x", query: [:]).text.contains("api-version is required"))
        #expect(gateway.request("GET", "/hub/installations/x", key: nil).status == 401)
        let listen = gateway.request("POST", "/hub/messages", headers: ["ServiceBusNotification-Format": "template"], body: "{}",
                                     key: AccessKey.defaultListenName)
        #expect(listen.status == 401 && listen.text.contains("Send"))
        #expect(gateway.publish.calls.isEmpty)
    }

    @Test("a native apple send is checked, and reaches the publish service with its platform and headers")
    func appleSend() throws {
        let gateway = try Gateway()
        gateway.publish.on(SendNotification.self) { _, _ in SendAccepted(notificationId: "n-1", state: .enqueued) }
        let sent = gateway.request("POST", "/hub/messages", headers: [
            "ServiceBusNotification-Format": "apple", "ServiceBusNotification-Tags": "World", "apns-push-type": "alert",
        ], body: #"{"aps":{"alert":"hi"}}"#)
        #expect(sent.status == 201)
        #expect(sent.header("Location") == "http://127.0.0.1:7780/hub/messages/n-1?api-version=2015-04")
        let send = try #require(gateway.publish.requests(SendNotification.self).first)
        #expect(send.platform == .apns && send.headers == ["apns-push-type": "alert"] && send.tagExpression == "World")
        let refused = gateway.request("POST", "/hub/messages", headers: ["ServiceBusNotification-Format": "apple"], body: #"{"alert":1}"#)
        #expect(refused.status == 400 && refused.text.contains("aps"))
        #expect(gateway.publish.calls.count == 1)
    }

    @Test("GET /messages/{id} is <NotificationDetails> XML, or JSON on Accept, with per-platform counts")
    func outcome() throws {
        let gateway = try Gateway()
        gateway.dispatch.on(OutcomeRequest.self) { request, _ in
            var outcome = NotificationOutcome(
                notificationId: request.notificationId, state: .completed, enqueuedAt: Date(timeIntervalSince1970: 1_800_000_000),
                startedAt: Date(timeIntervalSince1970: 1_800_000_001), endedAt: Date(timeIntervalSince1970: 1_800_000_002), targets: 2,
                delivered: 1, acknowledged: 1, failed: 1)
            outcome.platforms = ["apns": ["Targets": 1, "PnsUnavailable": 1], "linux": ["Targets": 1, "Success": 1]]
            return outcome
        }
        let xml = gateway.request("GET", "/hub/messages/n-9")
        #expect(xml.header("Content-Type")?.hasPrefix("application/xml") == true)
        #expect(xml.text.contains("<NotificationId>n-9</NotificationId>") && xml.text.contains("<TargetPlatforms>apple,linux</TargetPlatforms>"))
        #expect(xml.text.contains("<ApnsOutcomeCounts><Outcome><Name>PnsUnavailable</Name><Count>1</Count></Outcome></ApnsOutcomeCounts>"))
        let json = gateway.request("GET", "/hub/messages/n-9", headers: ["Accept": "application/json"])
        let decoded = try HubCodec.makeDecoder().decode(GatewayJSON.Outcome.self, from: json.body)
        #expect(decoded.state == "Completed" && decoded.platforms?["apns"]?["PnsUnavailable"] == 1)
        #expect(decoded.outcomeCounts.contains(GatewayJSON.Count(name: "Targets", count: 2)))
    }

    @Test("GET /messages lists the latest sends with their outcomes; one no service knows is left out, and an unreadable dispatcher is a 503")
    func recentMessages() throws {
        let gateway = try Gateway()
        let sends = ["n-1", "n-2", "n-3"].enumerated().map { index, id in
            AcceptedNotification(
                sequence: UInt64(index + 1), notificationId: id, send: SendNotification(format: .template, properties: ["m": id], tagExpression: "World"),
                enqueuedAt: Date(timeIntervalSince1970: 1_800_000_000), expiresAt: Date(timeIntervalSince1970: 1_800_086_400))
        }
        gateway.publish.on(PendingNotificationsRequest.self) { request, _ in
            PendingNotifications(notifications: sends.filter { $0.sequence > request.after }, latest: 3)
        }
        gateway.publish.on(OutcomeRequest.self) { request, _ in throw HubError(.notFound, "no \(request.notificationId)") }
        var dispatcherDown = false
        gateway.dispatch.on(OutcomeRequest.self) { request, _ in
            if dispatcherDown { throw HubError(.unavailable, "no reply from the dispatcher") }
            guard request.notificationId != "n-2" else { throw HubError(.notFound, "no \(request.notificationId)") }
            return NotificationOutcome(notificationId: request.notificationId, state: .completed, enqueuedAt: Date(), targets: 1, acknowledged: 1)
        }
        let listed = gateway.request("GET", "/hub/messages", query: ["api-version": "2015-01", "$top": "3"])
        #expect(listed.status == 200)
        let messages = try HubCodec.makeDecoder().decode(GatewayJSON.Messages.self, from: listed.body)
        #expect(messages.messages.map(\.notificationId) == ["n-3", "n-1"] && messages.latest == 3)
        dispatcherDown = true
        let down = gateway.request("GET", "/hub/messages", query: ["api-version": "2015-01", "$top": "3"])
        #expect(down.status == 503 && down.text.contains("no reply from the dispatcher"))
    }

    @Test("a test send answers <NotificationOutcome> with each target's result")
    func testSend() throws {
        let gateway = try Gateway()
        gateway.publish.on(SendNotification.self) { send, _ in
            #expect(send.test == true)
            return SendAccepted(notificationId: "t-1", state: .enqueued)
        }
        gateway.dispatch.on(OutcomeRequest.self) { _, _ in
            NotificationOutcome(notificationId: "t-1", state: .completed, enqueuedAt: Date(), targets: 2, acknowledged: 1, failed: 1)
        }
        gateway.dispatch.on(TestResultsRequest.self) { _, _ in
            TestResults(results: [
                TestResult(installationId: "dev-1", platform: "apns", pushChannel: "AABB", outcome: "PnsUnavailable: no path"),
                TestResult(installationId: "dev-2", platform: "linux", pushChannel: "key", outcome: "sent", success: true),
            ])
        }
        let response = gateway.request(
            "POST", "/hub/messages", query: ["api-version": "2015-01", "test": ""],
            headers: ["ServiceBusNotification-Format": "template"], body: #"{"m":"x"}"#)
        #expect(response.status == 201)
        #expect(response.text.contains("<Success>1</Success><Failure>1</Failure>"))
        #expect(response.text.contains(
            "<RegistrationResult><ApplicationPlatform>apple</ApplicationPlatform><PnsHandle>AABB</PnsHandle><RegistrationId>dev-1</RegistrationId><Outcome>PnsUnavailable: no path</Outcome></RegistrationResult>"))
    }

    @Test("a registration is written as an installation and read back as Azure's entry with its ETag")
    func registrations() throws {
        let gateway = try Gateway()
        gateway.registry.on(InstallationGet.self) { request, _ in throw HubError(.notFound, "no \(request.installationId)") }
        gateway.registry.on(InstallationUpsert.self) { request, _ in
            var stored = request.installation
            stored.version = 7
            return InstallationReply(installation: stored)
        }
        let body = #"""
            <entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><AppleTemplateRegistrationDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><Tags>a, b</Tags><DeviceToken>AABB</DeviceToken><BodyTemplate><![CDATA[{"aps":{"alert":"$(m)"}}]]></BodyTemplate><TemplateName>Alert</TemplateName></AppleTemplateRegistrationDescription></content></entry>
            """#
        let response = gateway.request("PUT", "/hub/registrations/reg-1", headers: ["If-Match": "*"], body: body)
        #expect(response.status == 200 && response.header("ETag") == "W/\"7\"")
        let upsert = try #require(gateway.registry.requests(InstallationUpsert.self).first)
        #expect(upsert.ifMatch == "*")
        #expect(upsert.installation.platform == "apns" && upsert.installation.tags == ["a", "b"] && upsert.installation.pushChannel == "AABB")
        #expect(upsert.installation.templates == ["Alert": InstallationTemplate(body: #"{"aps":{"alert":"$(m)"}}"#)])
        #expect(response.text.contains("<AppleTemplateRegistrationDescription "))
        #expect(response.text.contains("<ETag>7</ETag><RegistrationId>reg-1</RegistrationId><Tags>a,b</Tags><DeviceToken>AABB</DeviceToken>"))

        // A registry that cannot be read fails the save, rather than saving without the user the registration has.
        let unread = try Gateway()
        unread.registry.on(InstallationGet.self) { _, _ in throw HubError(.unavailable, "the registry did not answer") }
        let failed = unread.request("PUT", "/hub/registrations/reg-1", body: body)
        #expect(failed.status == 503 && unread.registry.requests(InstallationUpsert.self).isEmpty)
    }

    @Test("$filter reaches the registry as a push-channel match; one it does not understand is refused before")
    func filters() throws {
        let gateway = try Gateway()
        gateway.registry.on(InstallationList.self) { _, _ in InstallationPage(installations: [Self.installation]) }
        let found = gateway.request("GET", "/hub/registrations", query: ["api-version": "2015-01", "$filter": "DeviceToken eq 'AABB'"])
        #expect(found.status == 200 && found.text.contains("<RegistrationId>dev-1</RegistrationId>"))
        #expect(gateway.registry.requests(InstallationList.self).first?.pushChannel == "AABB")
        let refused = gateway.request("GET", "/hub/registrations", query: ["api-version": "2015-01", "$filter": "Tags eq 'World'"])
        #expect(refused.status == 400 && refused.text.contains("$filter"))
        #expect(gateway.registry.calls.count == 1)
        #expect(try RegistrationFilter.parse("ChannelUri eq 'it''s'") == .pushChannel("it's"))
        #expect(try RegistrationFilter.parse("RegistrationId eq 'r-1'") == .registrationId("r-1"))
    }

    @Test("a batch direct send turns each handle into its installation")
    func batch() throws {
        let gateway = try Gateway()
        gateway.registry.on(InstallationList.self) { request, _ in
            InstallationPage(installations: request.pushChannel == "AABB" ? [Self.installation] : [])
        }
        gateway.publish.on(SendNotification.self) { _, _ in SendAccepted(notificationId: "b-1", state: .enqueued) }
        let body = "--b\r\nContent-Disposition: inline; name=notification\r\n\r\n{\"aps\":{}}\r\n--b\r\nContent-Disposition: inline; name=devices\r\n\r\n[\"AABB\",\"CCDD\"]\r\n--b--\r\n"
        let response = gateway.request(
            "POST", "/hub/messages/$batch", query: ["api-version": "2015-01", "direct": ""],
            headers: ["ServiceBusNotification-Format": "apple", "Content-Type": "multipart/mixed; boundary=b"], body: body)
        #expect(response.status == 201)
        let ids = try #require(gateway.publish.requests(SendNotification.self).first?.installationIds)
        #expect(ids.first == "dev-1" && ids.count == 2 && ids[1].hasPrefix("unregistered-"))
    }

    @Test("the hub's own resources the README lists take no api-version", arguments: [
        ("GET", "/hub/health"), ("POST", "/hub/signatures"), ("GET", "/hub/expressions/check"), ("GET", "/hub/pns"),
        ("PUT", "/hub/pns/apple"), ("DELETE", "/hub/pns/apple"), ("GET", "/hub/pns/browser/key"), ("GET", "/hub/users/me/notifications"),
    ])
    func ownResourcesNeedNoVersion(method: String, path: String) throws {
        let gateway = try Gateway()
        let answer = gateway.request(method, path, query: [:])
        #expect(!answer.text.contains("api-version"), "\(method) \(path): \(answer.status) \(answer.text)")
        // Azure's own resources still need it.
        #expect(gateway.request("GET", "/hub/messages", query: [:]).text.contains("api-version is required"))
    }

    @Test("user endpoints need no api-version, and their JSON bodies are decoded strictly")
    func users() throws {
        let gateway = try Gateway()
        gateway.sync.on(UserTokenRequest.self) { request, _ in
            UserToken(userId: "alice", token: "t-\(request.credential)", expiresAt: Date(timeIntervalSince1970: 1_900_000_000))
        }
        let token = gateway.request("POST", "/hub/users/tokens", query: [:], body: #"{"credential":"c-1"}"#, key: nil)
        #expect(token.status == 200 && token.text.contains(#""token":"t-c-1""#))
        let extra = gateway.request("POST", "/hub/users/tokens", query: [:], body: #"{"credential":"c-1","more":1}"#, key: nil)
        #expect(extra.status == 400 && extra.text.contains("unknown_field") && extra.text.contains("more"))
        let wrong = gateway.request("POST", "/hub/users/tokens", query: [:], body: #"{"credential":5}"#, key: nil)
        #expect(wrong.status == 400 && wrong.text.contains("credential"))
        let state = gateway.request(
            "PATCH", "/hub/users/me/notifications/n-1", query: [:], headers: ["Authorization": "Bearer x"], body: #"{"readState":"maybe"}"#,
            key: nil)
        #expect(state.status == 400 && state.text.contains("invalid_argument: readState 'maybe' must be unread or read"))
        #expect(gateway.sync.requests(UpdateUserNotificationState.self).isEmpty)
    }
}
