import Foundation
import Registrations
import HTTPServer
import HubProtocol
import ServiceKit
import Synchronization

/// `/{hub}/messages` and `/{hub}/schedulednotifications`: sends, their outcomes, the latest sends,
/// and cancelling a scheduled one.
struct MessageRoutes {
    let services: GatewayServices
    /// The most a notification's body may carry.
    static let maxMessageBytes = 64 * 1024
    /// How long a test send (`?test`) waits for its targets' answers before reporting.
    static let testWaitSeconds: TimeInterval = 10
    /// Test sends waiting at once, across the HTTP workers: a quarter of them, so that waits never hold them all.
    static let testsWaiting = Atomic<Int>(0)
    static let propertyDecoder = JSONDecoder()

    /// `POST /{hub}/messages/$batch?direct`: one notification to a list of device handles.
    func sendBatch(_ request: HTTPRequest) throws -> HTTPResponse {
        guard request.query["direct"] != nil else { throw HubError(.invalidArgument, "a batch send is POST /\(services.hub)/messages/$batch?direct") }
        return try sendMessage(request, scheduled: false, batch: try BatchBody.parse(request.body, contentType: request.header("content-type")))
    }

    func cancelScheduled(_ request: HTTPRequest, _ id: String) throws -> HTTPResponse {
        _ = try services.publish.call(CancelScheduledNotification(notificationId: id))
        return GatewayResponse.empty(200)
    }

    func sendMessage(_ request: HTTPRequest, scheduled: Bool, batch: BatchBody? = nil) throws -> HTTPResponse {
        let send = try makeSend(request, scheduled: scheduled, batch: batch)
        guard send.test == true else { return acceptedResponse(try services.publish.call(send), request, scheduled: scheduled) }
        let allowed = max(services.context.config.limits.httpThreads / 4, 1)
        guard Self.testsWaiting.add(1, ordering: .relaxed).newValue <= allowed else {
            Self.testsWaiting.subtract(1, ordering: .relaxed)
            throw HubError(.rateLimited, "\(allowed) test sends are waiting for their outcomes already; retry in a second, or send without ?test")
        }
        defer { Self.testsWaiting.subtract(1, ordering: .relaxed) }
        let accepted = try services.publish.call(send)
        let created = acceptedResponse(accepted, request, scheduled: scheduled)
        var response = testOutcome(accepted.notificationId)
        response.headers += created.headers
        return response
    }

    /// 201, with where the accepted send's outcome is read.
    func acceptedResponse(_ accepted: SendAccepted, _ request: HTTPRequest, scheduled: Bool) -> HTTPResponse {
        let collection = scheduled ? "schedulednotifications" : "messages"
        let location = "\(services.hubURL(request))/\(collection)/\(accepted.notificationId)?api-version=2015-04"
        return GatewayResponse.empty(201, headers: [("Location", location), ("TrackingId", accepted.notificationId)])
    }

    /// The send a request asks for, its headers and body checked. A direct send or a batch looks up
    /// its device handles in the registry; any other reads no client of these routes, so the HTTP
    /// loop may make it (`GatewayRouter.forward`).
    func makeSend(_ request: HTTPRequest, scheduled: Bool, batch: BatchBody? = nil) throws -> SendNotification {
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
        let (outcome, results) = OutcomeLookup.waitForTest(id, dispatch: services.outcomes, publish: services.publish, seconds: Self.testWaitSeconds)
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
        let page = try services.registry.call(InstallationList(pushChannel: channel, limit: 1))
        // A handle no installation has reaches no one: the send is accepted and its outcome says NoTargetFound.
        return page.installations.first?.installationId ?? "unregistered-\(String(WebPages.fnv1a(Data(channel.utf8)), radix: 16))"
    }

    /// A template send's body: a JSON object of strings.
    static func propertyMap(_ body: Data) throws -> [String: String] {
        // An object of strings, as nearly every template send is, decodes in one pass (without the
        // decoder when written compactly, keys in order); anything else is parsed again to say what
        // is wrong with it.
        // Nil from both: parsed again below, which names what is wrong.
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
        let outcome = try OutcomeLookup.find(id, dispatch: services.outcomes, publish: services.publish)
        guard OutcomeXML.wantsJSON(request) else {
            return OutcomeXML.details(outcome, location: services.outcomeLocation(id, request))
        }
        return GatewayJSON.response(200, GatewayJSON.Outcome(outcome, location: services.outcomeLocation(id, request)))
    }

    /// `GET /{hub}/messages?$top=N`: the latest accepted notifications, newest first, each with its
    /// outcome and what it targeted (not its content).
    func recentMessages(_ request: HTTPRequest) throws -> HTTPResponse {
        let top = min(max(request.query["$top"].flatMap(Int.init) ?? 20, 1), 100)
        let latest = try services.publish.call(PendingNotificationsRequest(after: UInt64(Int64.max), limit: 1)).latest
        let page = try services.publish.call(PendingNotificationsRequest(after: latest > UInt64(top) ? latest - UInt64(top) : 0, limit: top))
        var list: [GatewayJSON.Outcome] = []
        for accepted in page.notifications.reversed() {
            // One no service knows any more is left out; a dispatcher that cannot be read fails the list (503).
            let outcome: NotificationOutcome
            do {
                outcome = try OutcomeLookup.find(accepted.notificationId, dispatch: services.outcomes, publish: services.publish)
            } catch let error as HubError where error.code == .notFound {
                continue
            }
            var item = GatewayJSON.Outcome(outcome, location: services.outcomeLocation(outcome.notificationId, request))
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

}
