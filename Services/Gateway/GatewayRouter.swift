import Bus
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit

/// The Notification Hubs REST API over the hub's services: each HTTP request is checked (hub,
/// api-version, then the right its route needs, `RouteTable`) and handed to its resource's
/// handlers, which turn it into bus requests. Each worker thread of the HTTP server owns one, so
/// its clients are used by one thread only.
final class GatewayRouter: @unchecked Sendable {
    let services: GatewayServices
    /// Responses by method and status, shared by every worker's routes.
    let counts: HTTPCounts
    let web: WebPages
    let installations: InstallationRoutes
    let registrations: RegistrationRoutes
    let jobs: JobRoutes
    let messages: MessageRoutes
    let users: UserRoutes
    let pushServices: PushServiceRoutes
    let pushEndpoints: PushEndpointRoutes
    let matrix: MatrixGatewayRoutes
    let hubResources: HubResourceRoutes
    let namespace: NamespaceRoutes

    /// `streams` is nil when the routes run in process, without the loop that feeds event streams;
    /// `pushRate` (pushes per apps' endpoint) is shared by every worker's routes.
    init(context: ServiceContext, registry: any ServiceCalling, publish: any ServiceCalling, dispatch: any ServiceCalling,
         outcomes: (any ServiceCalling)? = nil, sync: any ServiceCalling, counts: HTTPCounts, web: WebPages, streams: UserStreams?,
         pushRate: RateLimiter? = nil) {
        let current = CurrentHub(defaultHub: context.config.hub)
        // Every call of this worker names the hub of the request it answers.
        for caller in [registry, publish, dispatch, sync] + ((outcomes as? FirstAnswering)?.services ?? []) {
            (caller as? HubClient)?.hub = { current.scope.envelopeHub }
        }
        let services = GatewayServices(
            context: context, registry: registry, publish: publish, dispatch: dispatch, outcomes: outcomes ?? dispatch, sync: sync,
            current: current)
        self.services = services
        self.counts = counts
        self.web = web
        installations = InstallationRoutes(services: services)
        registrations = RegistrationRoutes(services: services)
        jobs = JobRoutes(services: services)
        messages = MessageRoutes(services: services)
        users = UserRoutes(services: services, streams: streams)
        pushServices = PushServiceRoutes(services: services)
        pushEndpoints = PushEndpointRoutes(
            services: services, pushRate: pushRate ?? RateLimiter(perSecond: context.config.limits.pushesPerSecondPerEndpoint), counts: counts)
        matrix = MatrixGatewayRoutes(pushEndpoints: pushEndpoints)
        hubResources = HubResourceRoutes(services: services, streams: streams, counts: counts)
        namespace = NamespaceRoutes(services: services)
    }

    var hub: String { services.hub }

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
        services.context.logger.debug("http", ("method", request.method), ("path", request.path), ("status", response.status))
        return response
    }

    /// Answers a send on the thread that read it, without waiting for the publish service: the send
    /// goes out through `publish`, and its reply answers the connection from the loop that watches
    /// `publish`. False for every other request, and for sends that wait on more than the publish
    /// service (test sends, which wait for their outcome; direct sends, which look up their device
    /// handle): a worker answers those. The route's right is checked as for a worker; that check
    /// and the send's read no bus client of this router, so any instance may forward, from any
    /// one thread.
    func forward(_ request: HTTPRequest, to publish: HubForwarder, reply: HTTPReply) -> Bool {
        guard request.method == "POST", request.query["test"] == nil, request.query["direct"] == nil else { return false }
        do {
            guard case .route(let route, _) = try resolve(request, settingCurrent: false), let scheduled = route.forwardedSend else { return false }
            try route.admit(services, request)
            let send = try messages.makeSend(request, scheduled: scheduled)
            publish.forward(send, hub: services.scope(of: request).envelopeHub) { [self] result in
                switch result {
                case .success(let accepted):
                    reply.send(finish(request, messages.acceptedResponse(accepted, request, scheduled: scheduled)))
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
        case matrixPush
        case namespace([String])
        case route(Route, [String])
    }

    private func route(_ request: HTTPRequest) throws -> HTTPResponse {
        switch try resolve(request, settingCurrent: true) {
        case .page(let page): return page
        case .metrics: return hubResources.metrics()
        case .pushEndpoint(let segments): return pushEndpoints.handle(request, segments)
        case .matrixPush: return matrix.handle(request)
        case .namespace(let segments): return try namespace.handle(request, segments)
        case .route(let route, let parameters): return try route.run(self, request, parameters)
        }
    }

    /// The hub's own resources, which take api-version but do not need it.
    static let ownResources: Set<String> = ["users", "health", "signatures", "expressions", "pns"]

    /// The page, metrics or push endpoint a request asks for, or the hub's route that answers it,
    /// once the hub and api-version are checked. `settingCurrent`: the worker answers it, and its
    /// handlers and clients take the request's hub (the HTTP loop's forwarded sends name it themselves).
    private func resolve(_ request: HTTPRequest, settingCurrent: Bool) throws -> Resolved {
        if settingCurrent { services.current.set(services.context.config.hub, services.context.scope(nil)) }
        if let page = try web.serve(request) { return .page(page) }
        let segments = request.path.split(separator: "/").map { $0.utf8.contains(UInt8(ascii: "%")) ? $0.removingPercentEncoding ?? String($0) : String($0) }
        guard let first = segments.first else { throw HubError(.notFound, "no resource at '/'; hub resources are under /\(hub)/") }
        if first == "metrics", segments.count == 1, request.method == "GET" { return .metrics }
        if first == "up" { return .pushEndpoint(Array(segments.dropFirst())) }
        if segments == MatrixGatewayRoutes.path { return .matrixPush }
        if first == NamespaceRoutes.segment { return .namespace(Array(segments.dropFirst())) }
        let scope = services.context.scope(first)
        guard services.context.hubs.has(scope) else {
            throw HubError(.notFound, "no hub '\(first)' in this namespace; its default hub is '\(services.context.config.hub)'")
        }
        if settingCurrent { services.current.set(first, scope) }
        let rest = Array(segments.dropFirst())
        // Notification Hubs' resources need api-version, as Azure does.
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
}
