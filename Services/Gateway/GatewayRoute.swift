import HTTPServer
import HubProtocol

/// The gateway's routes: a method and a path under the hub (`{}` is a parameter, literals match
/// regardless of case), and the handler that answers it. The first match wins.
struct GatewayRoute: Sendable {
    let method: String
    let pattern: [String]
    /// The pattern's literals lowercased, nil for its parameters.
    private let literals: [String?]
    let handle: @Sendable (GatewayRoutes, HTTPRequest, [String]) throws -> HTTPResponse
    /// For a send the HTTP loop may forward without a worker (`GatewayRoutes.forward`): whether it
    /// is scheduled. Nil for every other route.
    let forwardedSend: Bool?

    init(_ method: String, _ path: String, forwardedSend: Bool? = nil,
         _ handle: @escaping @Sendable (GatewayRoutes, HTTPRequest, [String]) throws -> HTTPResponse) {
        self.method = method
        pattern = path.split(separator: "/").map(String.init)
        literals = pattern.map { $0 == "{}" ? nil : $0.lowercased() }
        self.forwardedSend = forwardedSend
        self.handle = handle
    }

    static let table: [GatewayRoute] = [
        // Installations
        GatewayRoute("PUT", "installations/{}") { routes, request, p in try routes.putInstallation(p[0], request) },
        GatewayRoute("GET", "installations/{}") { routes, request, p in try routes.getInstallation(request, p[0]) },
        GatewayRoute("PATCH", "installations/{}") { routes, request, p in try routes.patchInstallation(request, p[0]) },
        GatewayRoute("DELETE", "installations/{}") { routes, request, p in try routes.delete(request, p[0], status: 204) },
        // Registrations
        GatewayRoute("POST", "registrations") { routes, request, _ in try routes.saveRegistration(GatewayRoutes.newRegistrationId(), request) },
        GatewayRoute("POST", "registrationIDs") { routes, request, _ in try routes.newRegistrationId(request) },
        GatewayRoute("GET", "registrations") { routes, request, _ in try routes.listRegistrations(request, tag: nil) },
        GatewayRoute("GET", "registrations/{}") { routes, request, p in try routes.getRegistration(request, p[0]) },
        GatewayRoute("PUT", "registrations/{}") { routes, request, p in try routes.saveRegistration(p[0], request) },
        GatewayRoute("DELETE", "registrations/{}") { routes, request, p in try routes.delete(request, p[0], status: 200) },
        GatewayRoute("GET", "tags/{}/registrations") { routes, request, p in try routes.listRegistrations(request, tag: p[0]) },
        // Sends and outcomes
        GatewayRoute("POST", "messages", forwardedSend: false) { routes, request, _ in try routes.sendMessage(request, scheduled: false) },
        GatewayRoute("POST", "messages/$batch") { routes, request, _ in try routes.sendBatch(request) },
        GatewayRoute("GET", "messages") { routes, request, _ in try routes.recentMessages(request) },
        GatewayRoute("GET", "messages/{}") { routes, request, p in try routes.outcome(p[0], request) },
        GatewayRoute("POST", "schedulednotifications", forwardedSend: true) { routes, request, _ in
            try routes.sendMessage(request, scheduled: true)
        },
        GatewayRoute("DELETE", "schedulednotifications/{}") { routes, request, p in try routes.cancelScheduled(request, p[0]) },
        // The hub's own resources
        GatewayRoute("GET", "health") { routes, request, _ in try routes.health(request) },
        GatewayRoute("POST", "signatures") { routes, request, _ in try routes.signature(request) },
        GatewayRoute("GET", "expressions/check") { routes, request, _ in try routes.checkExpression(request) },
        GatewayRoute("GET", "pns") { routes, request, _ in try routes.pushCredentials(request) },
        GatewayRoute("GET", "pns/browser/key") { routes, request, _ in try routes.vapidKey(request) },
        GatewayRoute("PUT", "pns/{}") { routes, request, p in try routes.setPushCredentials(request, p[0]) },
        GatewayRoute("DELETE", "pns/{}") { routes, request, p in try routes.removePushCredentials(request, p[0]) },
        // Users
        GatewayRoute("POST", "users/tokens") { routes, request, _ in try routes.userToken(request) },
        GatewayRoute("GET", "users/me/notifications") { routes, request, _ in try routes.userChanges(request) },
        GatewayRoute("GET", "users/me/notifications/history") { routes, request, _ in try routes.userHistory(request) },
        GatewayRoute("GET", "users/me/notifications/stream") { routes, request, _ in try routes.openStream(request) },
        GatewayRoute("PATCH", "users/me/notifications/{}") { routes, request, p in try routes.userState(request, p[0]) },
        GatewayRoute("DELETE", "users/me/notifications/{}") { routes, request, p in try routes.userDelete(request, p[0]) },
        GatewayRoute("POST", "users/{}/notifications") { routes, request, p in try routes.postUserNotification(p[0], request) },
    ]

    enum Match {
        case found(GatewayRoute, [String])
        /// The path is a resource, but not with this method.
        case wrongMethod
        case none
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

    static func match(_ method: String, _ segments: [String]) -> Match {
        var pathMatched = false
        for route in table {
            guard let parameters = route.parameters(segments) else { continue }
            if route.method == method { return .found(route, parameters) }
            pathMatched = true
        }
        return pathMatched ? .wrongMethod : .none
    }
}
