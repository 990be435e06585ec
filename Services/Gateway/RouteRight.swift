import Auth
import Foundation
import HTTPServer
import HubProtocol

/// The credential a route of the table needs (`RouteTable`), by name.
enum RouteRight: String, Sendable, CaseIterable {
    /// A shared-access signature over the request's URL by a key with that right; Manage has every right.
    case listen, send, manage
    /// `Authorization: Bearer` with a user token. Only its presence is checked here: the sync
    /// store checks the token on every call it is passed with.
    case userToken
    /// A user token as `Authorization: Bearer` or `?access_token=` (for `EventSource`, which
    /// cannot set headers), checked here: the stream outlives the request.
    case streamToken
    /// None before the handler: the body holds the key it proves (`POST signatures`).
    case keyItself
    /// None before the handler: the body holds a user's credential, which the sync store checks.
    case userCredential
}

/// How a route's right is checked, and what the check hands the route's handler (`Proof`): the
/// key that signed the request, the user token, or nothing. These are the only checks of a
/// caller's credential on the hub's routes; each route runs its own before its handler
/// (`Route.init`), and the HTTP loop runs it before forwarding a send (`GatewayRouter.forward`).
struct RightCheck<Proof>: Sendable {
    let right: RouteRight
    let check: @Sendable (GatewayServices, HTTPRequest) throws -> Proof
}

extension RightCheck where Proof == AccessKey {
    static var listen: Self { signed(.listen, needs: .listen) }
    static var send: Self { signed(.send, needs: .send) }
    static var manage: Self { signed(.manage, needs: .manage) }

    private static func signed(_ right: RouteRight, needs: AccessRights) -> Self {
        Self(right: right) { services, request in try signature(services, request, needs: needs) }
    }

    /// The request's shared-access signature must cover its URL and carry the right; the key's
    /// rate is taken.
    private static func signature(_ services: GatewayServices, _ request: HTTPRequest, needs: AccessRights) throws -> AccessKey {
        guard let header = request.header("authorization") else {
            throw HubError(.unauthorized, "no Authorization header; send SharedAccessSignature sr=…&sig=…&se=…&skn=…")
        }
        let key: AccessKey
        // The keys of the hub the path names: another hub's key is unknown here (401).
        let keys = try services.context.hubs.keys(for: services.scope(of: request))
        do {
            key = try keys.authorize(header, resource: services.baseURL(request) + request.path, needs: needs)
        } catch {
            // As Azure answers: a signature without the claim the request needs is 401, like any
            // other authorization failure; 403 is kept for what a valid caller may not do.
            throw HubError(.unauthorized, error.message)
        }
        try services.context.takeRate(of: key)
        return key
    }
}

extension RightCheck where Proof == String {
    static var userToken: Self {
        Self(right: .userToken) { services, request in
            guard let token = bearerToken(request) else {
                throw HubError(.unauthorized, "send the user token as Authorization: Bearer <token>; get one at POST /\(services.hub)/users/tokens")
            }
            return token
        }
    }
}

/// The user a stream's token names, and the token, with which the stream reads the user's changes.
struct StreamUser {
    let user: String
    let token: String
}

extension RightCheck where Proof == StreamUser {
    static var streamToken: Self {
        Self(right: .streamToken) { services, request in
            guard let token = bearerToken(request) ?? request.query["access_token"] else {
                throw HubError(
                    .unauthorized, "send the user token as Authorization: Bearer <token> or ?access_token=; get one at POST /\(services.hub)/users/tokens")
            }
            return StreamUser(user: try services.context.authorizeUser(token, hub: services.scope(of: request).envelopeHub).key, token: token)
        }
    }
}

extension RightCheck where Proof == Void {
    static var keyItself: Self { Self(right: .keyItself) { _, _ in } }
    static var userCredential: Self { Self(right: .userCredential) { _, _ in } }
}

/// The token of an `Authorization: Bearer` header; nil without one.
private func bearerToken(_ request: HTTPRequest) -> String? {
    guard let header = request.header("authorization"), header.hasPrefix("Bearer ") else { return nil }
    return String(header.dropFirst(7))
}
