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
    let admit: @Sendable (GatewayServices, HTTPRequest) throws -> Void
    /// Checks the right, then answers.
    let run: @Sendable (GatewayRouter, HTTPRequest, [String]) throws -> HTTPResponse
    /// For a send the HTTP loop may forward without a worker (`GatewayRouter.forward`): whether it
    /// is scheduled. Nil for every other route.
    let forwardedSend: Bool?

    /// The handler runs only once `right` has let the request through, and gets what it found.
    init<Proof>(
        _ method: String, _ path: String, _ right: RightCheck<Proof>, forwardedSend: Bool? = nil,
        _ handle: @escaping @Sendable (GatewayRouter, HTTPRequest, [String], Proof) throws -> HTTPResponse
    ) {
        self.method = method
        pattern = path.split(separator: "/").map(String.init)
        literals = pattern.map { $0 == "{}" ? nil : $0.lowercased() }
        self.right = right.right
        self.forwardedSend = forwardedSend
        admit = { services, request in _ = try right.check(services, request) }
        run = { router, request, parameters in try handle(router, request, parameters, try right.check(router.services, request)) }
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
        Route("PUT", "installations/{}", .listen) { gateway, request, p, key in try gateway.installations.put(p[0], request, key: key) },
        Route("GET", "installations/{}", .listen) { gateway, _, p, _ in try gateway.installations.get(p[0]) },
        Route("PATCH", "installations/{}", .listen) { gateway, request, p, key in try gateway.installations.patch(p[0], request, key: key) },
        Route("DELETE", "installations/{}", .listen) { gateway, request, p, _ in try gateway.installations.delete(p[0], request, status: 204) },
        // Registrations: installations in Azure's older shape.
        Route("POST", "registrations", .listen) { gateway, request, _, key in
            try gateway.registrations.save(RegistrationRoutes.newRegistrationId(), request, key: key)
        },
        Route("POST", "registrationIDs", .listen) { gateway, request, _, _ in try gateway.registrations.newRegistrationId(request) },
        Route("GET", "registrations", .manage) { gateway, request, _, _ in try gateway.registrations.list(request, tag: nil) },
        Route("GET", "registrations/{}", .listen) { gateway, request, p, _ in try gateway.registrations.get(p[0], request) },
        Route("PUT", "registrations/{}", .listen) { gateway, request, p, key in try gateway.registrations.save(p[0], request, key: key) },
        Route("DELETE", "registrations/{}", .listen) { gateway, request, p, _ in try gateway.installations.delete(p[0], request, status: 200) },
        Route("GET", "tags/{}/registrations", .manage) { gateway, request, p, _ in try gateway.registrations.list(request, tag: p[0]) },
        // Bulk jobs: imports and exports of installations, run by the registration service.
        Route("POST", "jobs", .manage) { gateway, request, _, _ in try gateway.jobs.create(request) },
        Route("GET", "jobs", .manage) { gateway, request, _, _ in try gateway.jobs.list(request) },
        Route("GET", "jobs/{}", .manage) { gateway, request, p, _ in try gateway.jobs.get(p[0], request) },
        // Sends and outcomes
        Route("POST", "messages", .send, forwardedSend: false) { gateway, request, _, _ in try gateway.messages.sendMessage(request, scheduled: false) },
        Route("POST", "messages/$batch", .send) { gateway, request, _, _ in try gateway.messages.sendBatch(request) },
        Route("GET", "messages", .send) { gateway, request, _, _ in try gateway.messages.recentMessages(request) },
        Route("GET", "messages/{}", .send) { gateway, request, p, _ in try gateway.messages.outcome(p[0], request) },
        Route("POST", "schedulednotifications", .send, forwardedSend: true) { gateway, request, _, _ in
            try gateway.messages.sendMessage(request, scheduled: true)
        },
        Route("DELETE", "schedulednotifications/{}", .send) { gateway, request, p, _ in try gateway.messages.cancelScheduled(request, p[0]) },
        // The hub's own resources
        Route("GET", "health", .manage) { gateway, _, _, _ in try gateway.hubResources.health() },
        Route("POST", "signatures", .keyItself) { gateway, request, _, _ in try gateway.hubResources.signature(request) },
        Route("GET", "expressions/check", .send) { gateway, request, _, _ in try gateway.hubResources.checkExpression(request) },
        // Push services. The VAPID key needs only Listen, as the device or web app that subscribes with it has.
        Route("GET", "pns", .manage) { gateway, _, _, _ in try gateway.pushServices.credentials() },
        Route("GET", "pns/browser/key", .listen) { gateway, _, _, _ in try gateway.pushServices.vapidKey() },
        Route("PUT", "pns/{}", .manage) { gateway, request, p, _ in try gateway.pushServices.setCredentials(p[0], request) },
        Route("DELETE", "pns/{}", .manage) { gateway, _, p, _ in try gateway.pushServices.removeCredentials(p[0]) },
        // Users
        Route("POST", "users/tokens", .userCredential) { gateway, request, _, _ in try gateway.users.token(request) },
        Route("GET", "users/me/notifications", .userToken) { gateway, request, _, token in try gateway.users.changes(request, token: token) },
        Route("GET", "users/me/notifications/history", .userToken) { gateway, _, _, token in try gateway.users.history(token: token) },
        Route("GET", "users/me/notifications/stream", .streamToken) { gateway, request, _, user in try gateway.users.openStream(request, user) },
        Route("PATCH", "users/me/notifications/{}", .userToken) { gateway, request, p, token in
            try gateway.users.setState(p[0], request, token: token)
        },
        Route("DELETE", "users/me/notifications/{}", .userToken) { gateway, request, p, token in
            try gateway.users.delete(p[0], request, token: token)
        },
        Route("POST", "users/{}/notifications", .send) { gateway, request, p, _ in try gateway.users.post(to: p[0], request) },
        // A user's encryption key: its public part for backends, the whole record and pairings for the user's devices.
        Route("GET", "users/me/key", .userToken) { gateway, request, _, token in try gateway.users.ownKey(request, token: token) },
        Route("PUT", "users/me/key", .userToken) { gateway, request, _, token in try gateway.users.putKey(request, token: token) },
        Route("POST", "users/me/pairing", .userToken) { gateway, request, _, token in try gateway.users.pairing(request, token: token) },
        Route("GET", "users/{}/key", .send) { gateway, _, p, _ in try gateway.users.key(of: p[0]) },
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
