import Auth
import Bus
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit
import Synchronization
import Tags

/// The Notification Hubs REST API over the hub's services: each HTTP request is checked (hub,
/// api-version, shared-access signature and rights) and turned into bus requests.
/// Each worker thread of the HTTP server owns one, so its clients are used by one thread only.
final class GatewayRoutes: @unchecked Sendable {
    let context: ServiceContext
    let registry: any ServiceCalling
    let publish: any ServiceCalling
    let dispatch: any ServiceCalling
    /// Where outcomes are read: this host's dispatcher, then its peers (`dispatch.peers`), which
    /// read the same store.
    let outcomes: any ServiceCalling
    let sync: any ServiceCalling
    static let maxMessageBytes = 64 * 1024
    /// How long a test send (`?test`) waits for its targets' answers before reporting.
    static let testWaitSeconds: TimeInterval = 10
    /// Test sends waiting at once, across the HTTP workers: a quarter of them, so that waits never hold them all.
    static let testsWaiting = Atomic<Int>(0)
    /// Responses by method and status, shared by every worker's routes.
    let counts: HTTPCounts
    let web: WebPages
    /// Absent when the routes run in process, without the loop that feeds event streams.
    let streams: UserStreams?
    /// Pushes per apps' endpoint, shared by every worker's routes.
    let pushRate: RateLimiter

    init(context: ServiceContext, registry: any ServiceCalling, publish: any ServiceCalling, dispatch: any ServiceCalling,
         outcomes: (any ServiceCalling)? = nil, sync: any ServiceCalling, counts: HTTPCounts, web: WebPages, streams: UserStreams?,
         pushRate: RateLimiter? = nil) {
        self.pushRate = pushRate ?? RateLimiter(perSecond: context.config.limits.pushesPerSecondPerEndpoint)
        self.counts = counts
        self.web = web
        self.streams = streams
        self.context = context
        self.registry = registry
        self.publish = publish
        self.dispatch = dispatch
        self.outcomes = outcomes ?? dispatch
        self.sync = sync
    }

    var hub: String { context.config.hub }

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        let response: HTTPResponse
        do {
            response = try route(request)
        } catch {
            response = Self.errorResponse(error)
        }
        return finish(request, response)
    }

    static func errorResponse(_ error: any Error) -> HTTPResponse {
        GatewayResponse.error(error as? HubError ?? HubError(.internal, "\(error)"))
    }

    /// Counts and logs a response on its way out.
    private func finish(_ request: HTTPRequest, _ response: HTTPResponse) -> HTTPResponse {
        counts.add("\(request.method) \(response.status)")
        context.logger.debug("http", ("method", request.method), ("path", request.path), ("status", response.status))
        return response
    }

    /// Answers a send on the thread that read it, without waiting for the publish service: the send
    /// goes out through `publish`, and its reply answers the connection from the loop that watches
    /// `publish`. False for every other request, and for sends that wait on more than the publish
    /// service (test sends, which wait for their outcome; direct sends, which look up their device
    /// handle): a worker answers those. What is checked before the send leaves reads no bus
    /// client of these routes, so any instance may forward, from any one thread.
    func forward(_ request: HTTPRequest, to publish: HubForwarder, reply: HTTPReply) -> Bool {
        guard request.method == "POST", request.query["test"] == nil, request.query["direct"] == nil else { return false }
        do {
            guard case .route(let route, _) = try resolve(request), let scheduled = route.forwardedSend else { return false }
            try route.admit(self, request)
            let send = try makeSend(request, scheduled: scheduled)
            publish.forward(send) { [self] result in
                switch result {
                case .success(let accepted):
                    reply.send(finish(request, acceptedResponse(accepted, request, scheduled: scheduled)))
                case .failure(let error):
                    reply.send(finish(request, GatewayResponse.error(error)))
                }
            }
        } catch {
            reply.send(finish(request, Self.errorResponse(error)))
        }
        return true
    }

    /// What a request asks for; finding it asks no other service.
    private enum Resolved {
        case page(HTTPResponse)
        case metrics
        case pushEndpoint([String])
        case route(Route, [String])
    }

    private func route(_ request: HTTPRequest) throws -> HTTPResponse {
        switch try resolve(request) {
        case .page(let page): return page
        case .metrics: return metrics()
        case .pushEndpoint(let segments): return pushEndpoint(request, segments)
        case .route(let route, let parameters): return try route.run(self, request, parameters)
        }
    }

    /// The page, metrics or push endpoint a request asks for, or the hub's route that answers it,
    /// once the hub and api-version are checked.
    private func resolve(_ request: HTTPRequest) throws -> Resolved {
        if let page = try web.serve(request) { return .page(page) }
        let segments = request.path.split(separator: "/").map { $0.utf8.contains(UInt8(ascii: "%")) ? $0.removingPercentEncoding ?? String($0) : String($0) }
        guard let first = segments.first else { throw HubError(.notFound, "no resource at '/'; hub resources are under /\(hub)/") }
        if first == "metrics", segments.count == 1, request.method == "GET" { return .metrics }
        if first == "up" { return .pushEndpoint(Array(segments.dropFirst())) }
        guard first == hub else { throw HubError(.notFound, "no hub '\(first)'; this namespace has '\(hub)'") }
        let rest = Array(segments.dropFirst())
        // The hub's own resources (users, health, expressions) take api-version but do not need it;
        // Notification Hubs' resources need it, as Azure does.
        if request.query["api-version"] != nil || !Self.ownResources.contains(rest.first ?? "") { try checkVersion(request) }
        switch RouteTable.match(request.method, rest) {
        case .found(let route, let parameters):
            return .route(route, parameters)
        case .wrongMethod:
            throw HubError(.invalidArgument, "\(request.method) is not supported on \(request.path)")
        case .none where RouteTable.routes.contains(where: { $0.pattern.first?.lowercased() == rest.first?.lowercased() }):
            throw HubError(.invalidArgument, "\(request.method) is not supported on \(request.path)")
        case .none:
            throw HubError(.notFound, "no resource at \(request.path)")
        }
    }

    // MARK: The handlers of the route table (RouteTable)

    func getInstallation(_ request: HTTPRequest, _ id: String) throws -> HTTPResponse {
        let reply = try registry.call(InstallationGet(installationId: id))
        return GatewayResponse.json(200, try InstallationJSON.encode(reply.installation))
    }

    func patchInstallation(_ request: HTTPRequest, _ id: String, key: AccessKey) throws -> HTTPResponse {
        let operations = try InstallationJSON.patch(request.body)
        // Signed with the caller's own key, so the registry grants exactly the caller's rights.
        _ = try registry.call(
            InstallationPatch(installationId: id, operations: operations, userToken: request.header("x-nh-user-token")),
            auth: context.token(for: key))
        // The REST reference gives 204, but the service answers 200 and the .NET, Java and JS SDKs require it.
        return GatewayResponse.empty(200)
    }

    /// Deleting what is not there succeeds, as the service does: 204 for an installation, 200 for a registration.
    func delete(_ request: HTTPRequest, _ id: String, status: Int) throws -> HTTPResponse {
        do {
            _ = try registry.call(InstallationDelete(installationId: id, ifMatch: request.header("if-match")))
        } catch let error as HubError where error.code == .notFound {}
        return GatewayResponse.empty(status)
    }

    func newRegistrationId(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = Self.newRegistrationId()
        return GatewayResponse.empty(201, headers: [
            ("Location", "\(baseURL(request))/\(hub)/registrationids/\(id)?api-version=2020-06"),
            ("Content-Location", "\(baseURL(request))/\(hub)/registrations/\(id)?api-version=2020-06"),
        ])
    }

    func getRegistration(_ request: HTTPRequest, _ id: String) throws -> HTTPResponse {
        let reply = try registry.call(InstallationGet(installationId: id))
        return RegistrationFeed.entry(reply.installation, base: baseURL(request) + "/" + hub)
    }

    func sendBatch(_ request: HTTPRequest) throws -> HTTPResponse {
        guard request.query["direct"] != nil else { throw HubError(.invalidArgument, "a batch send is POST /\(hub)/messages/$batch?direct") }
        return try sendMessage(request, scheduled: false, batch: try BatchBody.parse(request.body, contentType: request.header("content-type")))
    }

    func cancelScheduled(_ request: HTTPRequest, _ id: String) throws -> HTTPResponse {
        _ = try publish.call(CancelScheduledNotification(notificationId: id))
        return GatewayResponse.empty(200)
    }

    func userToken(_ request: HTTPRequest) throws -> HTTPResponse {
        let body = try GatewayJSON.decode(GatewayJSON.TokenRequest.self, request.body, "a JSON object with the user's credential, from nhctl user credential")
        return GatewayResponse.json(200, HubCodec.encodePayload(try sync.call(UserTokenRequest(credential: body.credential))))
    }

    func userChanges(_ request: HTTPRequest, token: String) throws -> HTTPResponse {
        let limit = request.query["limit"].flatMap(Int.init)
        let cursor = UInt64(request.query["cursor"] ?? "0") ?? 0
        return GatewayResponse.json(200, HubCodec.encodePayload(
            try sync.call(UserChangesRequest(cursor: cursor, limit: limit), auth: token)))
    }

    func userHistory(token: String) throws -> HTTPResponse {
        GatewayResponse.json(200, HubCodec.encodePayload(try sync.call(UserHistoryRequest(), auth: token)))
    }

    func userState(_ request: HTTPRequest, _ id: String, token: String) throws -> HTTPResponse {
        let body = try GatewayJSON.decode(GatewayJSON.StateChange.self, request.body, "a JSON object with readState and/or userActionState")
        let (read, action) = try body.states()
        let reply = try sync.call(
            UpdateUserNotificationState(id: id, readState: read, userActionState: action, device: request.header("x-device")),
            auth: token)
        return GatewayResponse.json(200, HubCodec.encodePayload(reply))
    }

    func userDelete(_ request: HTTPRequest, _ id: String, token: String) throws -> HTTPResponse {
        _ = try sync.call(DeleteUserNotification(id: id, device: request.header("x-device")), auth: token)
        return GatewayResponse.empty(204)
    }

    // MARK: Metrics

    /// Prometheus text for every service, asked over the bus, and the gateway's own HTTP counts.
    private func metrics() -> HTTPResponse {
        var lines: [String] = []
        var up: [(String, Bool)] = []
        for (service, reply) in askServices(MetricsRequest()) {
            up.append((service, reply != nil))
            for (name, value) in (reply?.samples ?? [:]).sorted(by: { $0.key < $1.key }) {
                lines.append(Self.sample(name, service: service, value))
            }
        }
        for (key, count) in counts.snapshot.sorted(by: { $0.key < $1.key }) {
            let parts = key.split(separator: " ")
            lines.append("nh_http_requests_total{service=\"nh-gateway\",method=\"\(parts[0])\",status=\"\(parts[1])\"} \(count)")
        }
        for (status, count) in counts.pushSnapshot.sorted(by: { $0.key < $1.key }) {
            lines.append("nh_push_endpoint_requests_total{service=\"nh-gateway\",status=\"\(status)\"} \(count)")
        }
        for (service, isUp) in up { lines.append("nh_up{service=\"\(service)\"} \(isUp ? 1 : 0)") }
        lines.append("nh_user_streams{service=\"nh-gateway\"} \(streams?.openCount.load(ordering: .relaxed) ?? 0)")
        return HTTPResponse(
            status: 200, headers: [("Content-Type", "text/plain; version=0.0.4")], body: Data((lines.joined(separator: "\n") + "\n").utf8))
    }

    /// Adds the service label to a sample name that may already have labels.
    static func sample(_ name: String, service: String, _ value: Double) -> String {
        let label = "service=\"\(service)\""
        let named = name.contains("{") ? name.replacingOccurrences(of: "{", with: "{\(label),") : "\(name){\(label)}"
        return "\(named) \(value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value))"
    }

    // MARK: Checks

    /// Every published api-version from 2015-01 to 2020-06 is accepted.
    private func checkVersion(_ request: HTTPRequest) throws {
        guard let version = request.query["api-version"] else {
            throw HubError(.invalidArgument, "api-version is required, such as ?api-version=2015-01")
        }
        let parts = version.split(separator: "-").compactMap { Int($0) }
        guard parts.count == 2, (1...12).contains(parts[1]), (0...9_999).contains(parts[0]) else {
            throw HubError(.invalidArgument, "api-version '\(version)' must be YYYY-MM, such as 2015-01")
        }
        let month = parts[0] * 12 + parts[1]
        guard (2015 * 12 + 1...2020 * 12 + 6).contains(month) else {
            throw HubError(.invalidArgument, "api-version '\(version)' is not one this hub speaks: 2015-01 to 2020-06")
        }
    }

    func baseURL(_ request: HTTPRequest) -> String {
        "\(request.isTLS ? "https" : "http")://\(request.header("host") ?? context.config.gatewayListen)"
    }

    // MARK: Registrations

    /// Registration ids in the shape Azure gives them: two random numbers and a counter.
    static func newRegistrationId() -> String {
        "\(UInt64.random(in: 1..<UInt64.max))-\(UInt64.random(in: 1..<UInt64.max))-1"
    }

    /// Creates or replaces the registration (an installation) from an Atom entry; with If-Match,
    /// only when the stored one still has that ETag. The user an installation has stays its user.
    func saveRegistration(_ id: String, _ request: HTTPRequest, key: AccessKey) throws -> HTTPResponse {
        var installation = try RegistrationXML.installation(RegistrationXML.parse(request.body), id: id)
        // Only a registration that is not there has no user to keep; a failed read fails the save.
        do {
            installation.userId = try registry.call(InstallationGet(installationId: id)).installation.userId
        } catch let error as HubError where error.code == .notFound {}
        let saved = try registry.call(
            InstallationUpsert(installation: installation, ifMatch: request.header("if-match")), auth: context.token(for: key))
        return RegistrationFeed.entry(saved.installation, base: baseURL(request) + "/" + hub)
    }

    /// A page of registrations as Atom, with `$top` (default 100, at most 1,000), the continuation
    /// token in `X-MS-ContinuationToken` or `?ContinuationToken=`, and an optional `$filter`.
    func listRegistrations(_ request: HTTPRequest, tag: String?) throws -> HTTPResponse {
        var top = 100
        if let text = request.query["$top"] {
            guard let value = Int(text), (1...1000).contains(value) else {
                throw HubError(.invalidArgument, "$top '\(text)' must be a whole number from 1 to 1000")
            }
            top = value
        }
        let after = request.header("x-ms-continuationtoken") ?? request.query["ContinuationToken"] ?? request.query["continuationtoken"]
        var list = InstallationList(tag: tag, limit: top, after: after)
        let base = baseURL(request) + "/" + hub
        if let text = request.query["$filter"] {
            switch try RegistrationFilter.parse(text) {
            case .pushChannel(let channel):
                list.pushChannel = channel
            case .registrationId(let id):
                var found: [Installation] = []
                do {
                    let installation = try registry.call(InstallationGet(installationId: id)).installation
                    if tag == nil || installation.tags.contains(tag!) { found = [installation] }
                } catch let error as HubError where error.code == .notFound {}
                return RegistrationFeed.feed(InstallationPage(installations: found), base: base)
            }
        }
        return RegistrationFeed.feed(try registry.call(list), base: base)
    }

    // MARK: Installations

    func putInstallation(_ id: String, _ request: HTTPRequest, key: AccessKey) throws -> HTTPResponse {
        var installation = try InstallationJSON.decode(request.body)
        guard installation.installationId == id else {
            throw HubError(.invalidArgument, "the body's installationId '\(installation.installationId)' is not the URL's '\(id)'")
        }
        installation.createdAt = nil
        installation.lastSeen = nil
        _ = try registry.call(
            InstallationUpsert(installation: installation, userToken: request.header("x-nh-user-token")), auth: context.token(for: key))
        return GatewayResponse.empty(200, headers: [("Content-Location", baseURL(request) + request.path)])
    }

    // MARK: Messages

    func sendMessage(_ request: HTTPRequest, scheduled: Bool, batch: BatchBody? = nil) throws -> HTTPResponse {
        let send = try makeSend(request, scheduled: scheduled, batch: batch)
        guard send.test == true else { return acceptedResponse(try publish.call(send), request, scheduled: scheduled) }
        let allowed = max(context.config.limits.httpThreads / 4, 1)
        guard Self.testsWaiting.add(1, ordering: .relaxed).newValue <= allowed else {
            Self.testsWaiting.subtract(1, ordering: .relaxed)
            throw HubError(.rateLimited, "\(allowed) test sends are waiting for their outcomes already; retry in a second, or send without ?test")
        }
        defer { Self.testsWaiting.subtract(1, ordering: .relaxed) }
        let accepted = try publish.call(send)
        let created = acceptedResponse(accepted, request, scheduled: scheduled)
        var response = testOutcome(accepted.notificationId)
        response.headers += created.headers
        return response
    }

    /// 201, with where the accepted send's outcome is read.
    private func acceptedResponse(_ accepted: SendAccepted, _ request: HTTPRequest, scheduled: Bool) -> HTTPResponse {
        let collection = scheduled ? "schedulednotifications" : "messages"
        let location = "\(baseURL(request))/\(hub)/\(collection)/\(accepted.notificationId)?api-version=2015-04"
        return GatewayResponse.empty(201, headers: [("Location", location), ("TrackingId", accepted.notificationId)])
    }

    /// The send a request asks for, checked: its headers and body. A direct send
    /// or a batch looks up its device handles in the registry.
    private func makeSend(_ request: HTTPRequest, scheduled: Bool, batch: BatchBody? = nil) throws -> SendNotification {
        let payload = batch?.notification ?? request.body
        guard !request.bodyTooLarge, payload.count <= Self.maxMessageBytes else {
            throw HubError(.payloadTooLarge, "the notification body is over \(Self.maxMessageBytes) bytes")
        }
        guard let format = request.header("servicebusnotification-format") else {
            throw HubError(.invalidArgument, "ServiceBusNotification-Format is required: template, or linux for a native notification")
        }
        var timeToLive: Int?
        if let text = request.header("servicebusnotification-timetolive") {
            guard let seconds = Int(text) else {
                throw HubError(.invalidArgument, "ServiceBusNotification-TimeToLive must be whole seconds, not '\(text)'")
            }
            timeToLive = seconds
        }
        var send: SendNotification
        var platform: Platform?
        if format.lowercased() == "template" {
            send = SendNotification(format: .template, properties: try Self.propertyMap(payload))
        } else if let native = Platform(format: format) {
            platform = native
            // The platform's own headers (apns-*, X-WNS-*) travel with the notification.
            var headers: [String: String] = [:]
            for (name, value) in request.headers where native.headerPrefixes.contains(where: { name.hasPrefix($0) }) {
                headers[name] = value
            }
            let body = String(decoding: payload, as: UTF8.self)
            try native.check(payload: body, headers: headers)
            send = SendNotification(
                format: .native, body: body, platform: native == .linux ? nil : native, headers: headers.isEmpty ? nil : headers)
        } else {
            throw HubError(
                .invalidArgument, "ServiceBusNotification-Format '\(format)' is not one this hub takes: \(Platform.formats)")
        }
        send.timeToLive = timeToLive
        send.idempotencyKey = request.header("servicebusnotification-idempotencykey")
        if scheduled {
            guard let text = request.header("servicebusnotification-scheduletime") else {
                throw HubError(.invalidArgument, "a scheduled send needs ServiceBusNotification-ScheduleTime, an ISO 8601 UTC time")
            }
            guard let time = WireDate.parse(text) ?? WireDate.parse(text + "Z") else {
                throw HubError(.invalidArgument, "ServiceBusNotification-ScheduleTime '\(text)' is not an ISO 8601 time such as 2026-01-31T12:00:00Z")
            }
            send.scheduledAt = time
        }
        if let batch {
            var ids: [String] = []
            for handle in batch.devices { ids.append(try installation(forHandle: handle, platform: platform, request)) }
            send.installationIds = ids
        } else if request.query["direct"] != nil {
            guard let handle = request.header("servicebusnotification-devicehandle") else {
                throw HubError(.invalidArgument, "a direct send needs ServiceBusNotification-DeviceHandle")
            }
            send.installationId = try installation(forHandle: handle, platform: platform, request)
        } else if let tags = request.header("servicebusnotification-tags"), !tags.isEmpty {
            send.tagExpression = tags
        }
        if request.query["test"] != nil && !scheduled { send.test = true }
        return send
    }

    /// A test send's `<NotificationOutcome>`: waits (at most `testWaitSeconds`) until the dispatcher
    /// has planned it and its first targets have answered, then reports each, as Azure does.
    private func testOutcome(_ id: String) -> HTTPResponse {
        let (outcome, results) = OutcomeLookup.waitForTest(id, dispatch: outcomes, publish: publish, seconds: Self.testWaitSeconds)
        return OutcomeXML.testOutcome(outcome, results: results, waited: Self.testWaitSeconds)
    }

    /// The installation a direct send's device handle names: an agent's handle is its installation
    /// id; another platform's is its push channel (a browser's, the endpoint with the P256DH and
    /// Auth headers).
    private func installation(forHandle handle: String, platform: Platform?, _ request: HTTPRequest) throws -> String {
        guard let platform, platform != .linux else { return handle }
        var channel = handle
        if platform == .browser {
            channel = try InstallationJSON.browserChannel(
                endpoint: handle, p256dh: request.header("p256dh") ?? "", auth: request.header("auth") ?? "")
        }
        let page = try registry.call(InstallationList(pushChannel: channel, limit: 1))
        // A handle no installation has reaches no one: the send is accepted and its outcome says NoTargetFound.
        return page.installations.first?.installationId ?? "unregistered-\(String(WebPages.fnv1a(Data(channel.utf8)), radix: 16))"
    }

    /// A template send's body: a JSON object of strings.
    static func propertyMap(_ body: Data) throws -> [String: String] {
        // An object of strings, as nearly every template send is, decodes in one pass (without the
        // decoder when written compactly, keys in order); anything else is parsed again to say what
        // is wrong with it.
        if let properties = WrittenJSON.stringMap(body) ?? (try? propertyDecoder.decode([String: String].self, from: body)) { return properties }
        guard let object = JSONValue.parse(body)?.objectValue else {
            throw HubError(.invalidPayload, "a template notification's body must be a JSON object of property names to strings")
        }
        var properties: [String: String] = [:]
        for (key, value) in object {
            guard let text = value.stringValue else {
                throw HubError(.invalidPayload, "template property '\(key)' must be a string")
            }
            properties[key] = text
        }
        return properties
    }

    /// `<NotificationDetails>` as Azure answers, or JSON for a client that asks for it with `Accept`.
    func outcome(_ id: String, _ request: HTTPRequest) throws -> HTTPResponse {
        let outcome = try OutcomeLookup.find(id, dispatch: outcomes, publish: publish)
        guard OutcomeXML.wantsJSON(request) else {
            return OutcomeXML.details(outcome, location: "\(baseURL(request))/\(hub)/messages/\(id)?api-version=2015-04")
        }
        return GatewayJSON.response(200, GatewayJSON.Outcome(outcome, location: location(of: id, request)))
    }

    private func location(of id: String, _ request: HTTPRequest) -> String {
        "\(baseURL(request))/\(hub)/messages/\(id)?api-version=2015-04"
    }

    /// `GET /{hub}/messages?$top=N`: the latest accepted notifications, newest first, each with its
    /// outcome and what it targeted (not its content).
    func recentMessages(_ request: HTTPRequest) throws -> HTTPResponse {
        let top = min(max(request.query["$top"].flatMap(Int.init) ?? 20, 1), 100)
        let latest = try publish.call(PendingNotificationsRequest(after: UInt64(Int64.max), limit: 1)).latest
        let page = try publish.call(PendingNotificationsRequest(after: latest > UInt64(top) ? latest - UInt64(top) : 0, limit: top))
        var list: [GatewayJSON.Outcome] = []
        for accepted in page.notifications.reversed() {
            // One no service knows any more is left out; a dispatcher that cannot be read fails the list (503).
            let outcome: NotificationOutcome
            do {
                outcome = try OutcomeLookup.find(accepted.notificationId, dispatch: outcomes, publish: publish)
            } catch let error as HubError where error.code == .notFound {
                continue
            }
            var item = GatewayJSON.Outcome(outcome, location: location(of: outcome.notificationId, request))
            let send = accepted.send
            item.format = send.rich != nil ? "rich" : send.platform?.format ?? send.format.rawValue
            item.tags = send.tagExpression
            item.installationId = send.installationId
            item.userId = send.userId
            item.scheduleTime = send.scheduledAt
            list.append(item)
        }
        return GatewayJSON.response(200, GatewayJSON.Messages(messages: list, latest: latest))
    }

    // MARK: The hub's own resources

    static let propertyDecoder = JSONDecoder()
    static let ownResources: Set<String> = ["users", "health", "expressions", "pns"]

    /// Asks every service (not the gateway or an agent) the same question, 500 ms each; a service
    /// that does not answer has no reply (it is down), and why is logged.
    private func askServices<R: HubRequest>(_ request: R) -> [(service: String, reply: R.Reply?)] {
        context.config.serviceEndpoints.filter { $0.service != "nh-gateway" && $0.service != "nh-agent" }.map { service, endpoints in
            do {
                let client = try HubClient(
                    connect: endpoints.requests, policy: RetryPolicy(timeout: 500, attempts: 1), curve: context.bus.security?.client)
                defer { client.close() }
                return (service, try client.call(request, auth: context.serviceToken()))
            } catch {
                context.logger.debug("a service did not answer", ("service", service), ("request", R.messageType), ("error", "\(error)"))
                return (service, nil)
            }
        }
    }

    /// `POST /{hub}/signatures`: a shared-access signature made here, for a page that cannot make
    /// one (WebCrypto needs a secure context, which a page loaded over http:// from another machine
    /// is not). The body names a key and holds it, as its connection string does; the token covers
    /// this hub at the address the request came to, for an hour, with that key's rights.
    func signature(_ request: HTTPRequest) throws -> HTTPResponse {
        let body = try GatewayJSON.decode(GatewayJSON.SignatureRequest.self, request.body, "a JSON object with keyName and key, from a connection string")
        guard let stored = context.keys.key(named: body.keyName), Crypto.constantTimeEqual(Data(stored.key.utf8), Data(body.key.utf8)) else {
            throw HubError(.unauthorized, "no key named '\(body.keyName)' with that value: copy the connection string from nhctl keys")
        }
        try context.takeRate(of: stored)
        let expiresAt = Date().addingTimeInterval(3_600)
        let token = SharedAccessSignature.sign(
            resource: (baseURL(request) + "/" + hub).lowercased(), keyName: stored.name, key: stored.key, expiry: Int(expiresAt.timeIntervalSince1970))
        return GatewayJSON.response(200, GatewayJSON.Signature(token: token, expiresAt: expiresAt), headers: [("Cache-Control", "no-store")])
    }

    /// `GET /{hub}/health`: each service up or down, with its uptime, version and figures (queue
    /// depths among them), and the gateway's own.
    func health(_ request: HTTPRequest) throws -> HTTPResponse {
        func row(_ service: String, _ reply: HealthReply?) -> GatewayJSON.ServiceHealth {
            guard let reply else { return GatewayJSON.ServiceHealth(service: service, up: false, status: "down") }
            return GatewayJSON.ServiceHealth(
                service: service, up: true, status: reply.status, version: reply.version, pid: reply.pid,
                uptimeSeconds: (reply.uptimeSeconds * 10).rounded() / 10, details: reply.details ?? [:])
        }
        var services = askServices(HealthRequest()).map { row($0.service, $0.reply) }
        services.append(row("nh-gateway", context.health([:], details: [
            "userStreams": String(streams?.openCount.load(ordering: .relaxed) ?? 0), "httpThreads": String(context.config.limits.httpThreads),
        ])))
        return GatewayJSON.response(200, GatewayJSON.Health(status: services.allSatisfy(\.up) ? "ok" : "degraded", services: services))
    }

    // MARK: Push services

    /// `GET /{hub}/pns`: the push services the dispatcher delivers to, without their secrets.
    func pushCredentials(_ request: HTTPRequest) throws -> HTTPResponse {
        return GatewayJSON.response(200, try dispatch.call(PushCredentialsRequest(), auth: nil))
    }

    /// `GET /{hub}/pns/browser/key`: the VAPID public key a web app subscribes with
    /// (`applicationServerKey`). A Listen key may read it, as a device registers with one.
    func vapidKey(_ request: HTTPRequest) throws -> HTTPResponse {
        let reply = try dispatch.call(PushCredentialsRequest(), auth: nil)
        guard let key = reply.services.first(where: { $0.service == PushServiceName.browser })?.publicKey else {
            throw HubError(.notFound, "Web Push is not configured; set push.browser.subject, or PUT /\(hub)/pns/browser")
        }
        return GatewayJSON.response(200, GatewayJSON.VAPIDKey(publicKey: key))
    }

    /// `PUT /{hub}/pns/{apple|fcm|browser}`: one push service's credentials, checked by the
    /// dispatcher before they are kept. A key travels as its text (`key`, `serviceAccount`).
    func setPushCredentials(_ request: HTTPRequest, _ service: String) throws -> HTTPResponse {
        guard PushServiceName.all.contains(service) else {
            throw HubError(.notFound, "'\(service)' is not a push service; use \(PushServiceName.all.joined(separator: ", "))")
        }
        guard var body = JSONValue.parse(request.body)?.objectValue else {
            throw HubError(.invalidPayload, "the body must be a JSON object with the \(service) credentials")
        }
        // A service account may come as the object Google issues, or as its text.
        if service == "fcm", let account = body["serviceAccount"], account.stringValue == nil {
            body["serviceAccount"] = .string(String(decoding: try account.encoded(), as: UTF8.self))
        }
        let wrapped = try JSONValue.object([service: .object(body)]).encoded()
        let set = try GatewayJSON.decode(PushCredentialsSetRequest.self, wrapped, "the \(service) credentials as a JSON object")
        return GatewayJSON.response(200, try dispatch.call(set, auth: nil))
    }

    /// `DELETE /{hub}/pns/{service}`: removes credentials set over the bus or REST.
    func removePushCredentials(_ request: HTTPRequest, _ service: String) throws -> HTTPResponse {
        guard PushServiceName.all.contains(service) else {
            throw HubError(.notFound, "'\(service)' is not a push service; use \(PushServiceName.all.joined(separator: ", "))")
        }
        return GatewayJSON.response(200, try dispatch.call(PushCredentialsSetRequest(remove: [service]), auth: nil))
    }

    /// `GET /{hub}/expressions/check?expression=…`: parses a tag expression as the publish service
    /// will, so a form can show the error and where it is before anything is sent.
    func checkExpression(_ request: HTTPRequest) throws -> HTTPResponse {
        guard let text = request.query["expression"] else {
            throw HubError(.invalidArgument, "give the tag expression as ?expression=, such as World && !Sports")
        }
        guard text.utf8.count <= context.config.limits.expressionBytes else {
            return GatewayJSON.response(200, GatewayJSON.ExpressionCheck(
                valid: false, code: ErrorCode.invalidExpression.rawValue,
                message: "the tag expression is \(text.utf8.count) bytes; the limit is \(context.config.limits.expressionBytes) (limits.expressionBytes)"))
        }
        do {
            let expression = try TagExpression.parse(text)
            return GatewayJSON.response(200, GatewayJSON.ExpressionCheck(valid: true, tags: Array(Set(expression.tags)).sorted()))
        } catch {
            return GatewayJSON.response(200, GatewayJSON.ExpressionCheck(
                valid: false, code: ErrorCode.invalidExpression.rawValue, message: error.message, position: error.position))
        }
    }

    /// `GET /{hub}/users/me/notifications/stream`: server-sent events of the user's changes from the
    /// cursor in `Last-Event-ID` or `?cursor=` (absent: from now).
    func openStream(_ request: HTTPRequest, _ caller: StreamUser) throws -> HTTPResponse {
        let token = caller.token
        let given = request.header("last-event-id") ?? request.query["cursor"]
        var cursor: UInt64
        if let given {
            guard let value = UInt64(given) else { throw HubError(.invalidArgument, "the cursor '\(given)' must be a whole number, as a previous event's id") }
            cursor = value
            // The store checks the token and the cursor now, so that either is refused with its status.
            _ = try sync.call(UserChangesRequest(cursor: cursor, limit: 1), auth: token)
        } else {
            cursor = try sync.call(UserHistoryRequest(), auth: token).cursor
        }
        guard let streams else { throw HubError(.unavailable, "this gateway serves no event streams") }
        let stream = try streams.open(user: caller.user, token: token, cursor: cursor)
        return HTTPResponse(
            status: 200,
            headers: [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")],
            stream: stream)
    }

    // MARK: User notifications

    func postUserNotification(_ user: String, _ request: HTTPRequest) throws -> HTTPResponse {
        guard var object = JSONValue.parse(request.body)?.objectValue else {
            throw HubError(.invalidPayload, "the body must be a JSON object with appNotificationId and visual and/or raw content")
        }
        object["userId"] = .string(user)
        let post = try HubCodec.decodePayload(PostUserNotification.self, from: try JSONValue.object(object).encoded())
        let reply = try publish.call(post)
        return GatewayResponse.json(201, HubCodec.encodePayload(reply),
                                    headers: [("Location", "\(baseURL(request))\(request.path)/\(reply.notification.id)")])
    }
}

/// HTTP responses counted by method and status, from every HTTP thread.
final class HTTPCounts: Sendable {
    private let counts = Mutex<[String: Int]>([:])
    private let pushes = Mutex<[Int: Int]>([:])

    func add(_ key: String) { counts.withLock { $0[key, default: 0] += 1 } }
    var snapshot: [String: Int] { counts.withLock { $0 } }

    /// Pushes to apps' endpoints, by the status answered.
    func add(push status: Int) { pushes.withLock { $0[status, default: 0] += 1 } }
    var pushSnapshot: [Int: Int] { pushes.withLock { $0 } }
}

extension ServiceCalling {
    /// A call signed by the caller's own auth provider (a `HubClient`'s), or unsigned for a stand-in.
    func call<R: HubRequest>(_ request: R) throws -> R.Reply { try call(request, auth: nil) }
}
