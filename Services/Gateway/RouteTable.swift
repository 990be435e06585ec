import HTTPServer
import HubProtocol

/// One of the hub's routes: a method and a path under the hub (`{}` is a parameter, literals match
/// regardless of case), the right it needs, and the handler that answers it with what the check of
/// that right produced.
struct Route: Sendable {
    let method: String
    let pattern: [String]
    /// The pattern's literals lowercased, nil for its parameters.
    private let literals: [String?]
    let right: RouteRight
    /// Checks the right alone, for a send the HTTP loop forwards without its handler.
    let admit: @Sendable (GatewayRoutes, HTTPRequest) throws -> Void
    /// Checks the right, then answers.
    let run: @Sendable (GatewayRoutes, HTTPRequest, [String]) throws -> HTTPResponse
    /// For a send the HTTP loop may forward without a worker (`GatewayRoutes.forward`): whether it
    /// is scheduled. Nil for every other route.
    let forwardedSend: Bool?

    /// The handler runs only once `right` has let the request through, and gets what it found.
    init<Proof>(
        _ method: String, _ path: String, _ right: RightCheck<Proof>, forwardedSend: Bool? = nil,
        _ handle: @escaping @Sendable (GatewayRoutes, HTTPRequest, [String], Proof) throws -> HTTPResponse
    ) {
        self.method = method
        pattern = path.split(separator: "/").map(String.init)
        literals = pattern.map { $0 == "{}" ? nil : $0.lowercased() }
        self.right = right.right
        self.forwardedSend = forwardedSend
        admit = { routes, request in _ = try right.check(routes, request) }
        run = { routes, request, parameters in try handle(routes, request, parameters, try right.check(routes, request)) }
    }

    /// The parameters, when `segments` fit the pattern.
    func parameters(_ segments: [String]) -> [String]? {
        guard segments.count == pattern.count else { return nil }
        var parameters: [String] = []
        for (literal, segment) in zip(literals, segments) {
            if let literal {
                guard literal == segment || literal == segment.lowercased() else { return nil }
            } else {
                parameters.append(segment)
            }
        }
        return parameters
    }
}

/// The hub's routes, each with the right it needs; the first match wins.
enum RouteTable {
    static let routes: [Route] = [
        // Installations. Listen may write one; the registry, called with the caller's own key,
        // decides what only Manage or the user's token may set (its user).
        Route("PUT", "installations/{}", .listen) { routes, request, p, key in try routes.putInstallation(p[0], request, key: key) },
        Route("GET", "installations/{}", .listen) { routes, request, p, _ in try routes.getInstallation(request, p[0]) },
        Route("PATCH", "installations/{}", .listen) { routes, request, p, key in try routes.patchInstallation(request, p[0], key: key) },
        Route("DELETE", "installations/{}", .listen) { routes, request, p, _ in try routes.delete(request, p[0], status: 204) },
        // Registrations: installations in Azure's older shape.
        Route("POST", "registrations", .listen) { routes, request, _, key in
            try routes.saveRegistration(GatewayRoutes.newRegistrationId(), request, key: key)
        },
        Route("POST", "registrationIDs", .listen) { routes, request, _, _ in try routes.newRegistrationId(request) },
        Route("GET", "registrations", .manage) { routes, request, _, _ in try routes.listRegistrations(request, tag: nil) },
        Route("GET", "registrations/{}", .listen) { routes, request, p, _ in try routes.getRegistration(request, p[0]) },
        Route("PUT", "registrations/{}", .listen) { routes, request, p, key in try routes.saveRegistration(p[0], request, key: key) },
        Route("DELETE", "registrations/{}", .listen) { routes, request, p, _ in try routes.delete(request, p[0], status: 200) },
        Route("GET", "tags/{}/registrations", .manage) { routes, request, p, _ in try routes.listRegistrations(request, tag: p[0]) },
        // Sends and outcomes
        Route("POST", "messages", .send, forwardedSend: false) { routes, request, _, _ in try routes.sendMessage(request, scheduled: false) },
        Route("POST", "messages/$batch", .send) { routes, request, _, _ in try routes.sendBatch(request) },
        Route("GET", "messages", .send) { routes, request, _, _ in try routes.recentMessages(request) },
        Route("GET", "messages/{}", .send) { routes, request, p, _ in try routes.outcome(p[0], request) },
        Route("POST", "schedulednotifications", .send, forwardedSend: true) { routes, request, _, _ in
            try routes.sendMessage(request, scheduled: true)
        },
        Route("DELETE", "schedulednotifications/{}", .send) { routes, request, p, _ in try routes.cancelScheduled(request, p[0]) },
        // The hub's own resources
        Route("GET", "health", .manage) { routes, request, _, _ in try routes.health(request) },
        Route("POST", "signatures", .keyItself) { routes, request, _, _ in try routes.signature(request) },
        Route("GET", "expressions/check", .send) { routes, request, _, _ in try routes.checkExpression(request) },
        Route("GET", "pns", .manage) { routes, request, _, _ in try routes.pushCredentials(request) },
        // Listen, as a device or a web app subscribes with it.
        Route("GET", "pns/browser/key", .listen) { routes, request, _, _ in try routes.vapidKey(request) },
        Route("PUT", "pns/{}", .manage) { routes, request, p, _ in try routes.setPushCredentials(request, p[0]) },
        Route("DELETE", "pns/{}", .manage) { routes, request, p, _ in try routes.removePushCredentials(request, p[0]) },
        // Users
        Route("POST", "users/tokens", .userCredential) { routes, request, _, _ in try routes.userToken(request) },
        Route("GET", "users/me/notifications", .userToken) { routes, request, _, token in try routes.userChanges(request, token: token) },
        Route("GET", "users/me/notifications/history", .userToken) { routes, _, _, token in try routes.userHistory(token: token) },
        Route("GET", "users/me/notifications/stream", .streamToken) { routes, request, _, user in try routes.openStream(request, user) },
        Route("PATCH", "users/me/notifications/{}", .userToken) { routes, request, p, token in
            try routes.userState(request, p[0], token: token)
        },
        Route("DELETE", "users/me/notifications/{}", .userToken) { routes, request, p, token in
            try routes.userDelete(request, p[0], token: token)
        },
        Route("POST", "users/{}/notifications", .send) { routes, request, p, _ in try routes.postUserNotification(p[0], request) },
    ]

    enum Match {
        case found(Route, [String])
        /// The path is a resource, but not with this method.
        case wrongMethod
        case none
    }

    static func match(_ method: String, _ segments: [String]) -> Match {
        var pathMatched = false
        for route in routes {
            guard let parameters = route.parameters(segments) else { continue }
            if route.method == method { return .found(route, parameters) }
            pathMatched = true
        }
        return pathMatched ? .wrongMethod : .none
    }
}
