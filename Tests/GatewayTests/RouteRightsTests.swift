import Auth
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit
import Testing

@testable import NHGateway

/// The right each of the hub's routes needs, written out here rather than read from the table, so
/// that a route added, or a right changed, shows up as a failure to look at.
struct RouteRow: Sendable, CustomTestStringConvertible {
    let method: String
    let path: String
    let right: RouteRight

    init(_ method: String, _ path: String, _ right: RouteRight) {
        self.method = method
        self.path = path
        self.right = right
    }

    var testDescription: String { "\(method) \(path)" }
}

/// What a request may carry to prove its caller, from a key's signature to a user's token or
/// credential, right or wrong.
enum Credential: String, Sendable, CaseIterable {
    case none
    case listenKey, sendKey, manageKey
    case expiredManageKey, forgedManageKey, otherHubManageKey
    case userToken, userTokenInQuery, expiredUserToken, forgedUserToken, forgedUserTokenInQuery, userCredentialAsToken
    case keyInBody, wrongKeyInBody, unknownKeyInBody
    case userCredential, expiredUserCredential, forgedUserCredential, userTokenAsCredential

    /// A signature by the right name and a wrong key; a token of the right shape and a wrong signature.
    static let forgedKey = Data(repeating: 7, count: 32).base64EncodedString()
    static let forgedUser = "nhu1.eyJ1c2VyIjoiYWxpY2UifQ.AAAA"

    /// Those the route must refuse, with today's status: 400 where nothing in the body is the
    /// credential (the body is checked first, as a malformed one).
    static func weaker(than right: RouteRight) -> [(Credential, Int)] {
        let signed: [Credential] = [.none, .expiredManageKey, .forgedManageKey, .otherHubManageKey, .userToken]
        let user: [Credential] = [.none, .manageKey, .expiredUserToken, .forgedUserToken, .userCredentialAsToken]
        let refused: [Credential]
        switch right {
        case .listen: refused = signed
        case .send: refused = signed + [.listenKey]
        case .manage: refused = signed + [.listenKey, .sendKey]
        case .userToken: refused = user
        case .streamToken: refused = user + [.forgedUserTokenInQuery]
        case .keyItself: return [(.none, 400), (.manageKey, 400), (.wrongKeyInBody, 401), (.unknownKeyInBody, 401)]
        case .userCredential:
            return [(.none, 400), (.manageKey, 400), (.expiredUserCredential, 401), (.forgedUserCredential, 401), (.userTokenAsCredential, 401)]
        }
        return refused.map { ($0, 401) }
    }

    /// The weakest that the route lets through.
    static func enough(for right: RouteRight) -> [Credential] {
        switch right {
        case .listen: [.listenKey]
        case .send: [.sendKey]
        case .manage: [.manageKey]
        case .userToken: [.userToken]
        case .streamToken: [.userToken, .userTokenInQuery]
        case .keyItself: [.keyInBody]
        case .userCredential: [.userCredential]
        }
    }
}

/// One refusal the rights test expects.
struct Refusal: Sendable, CustomTestStringConvertible {
    let route: RouteRow
    let credential: Credential
    let status: Int
    var testDescription: String { "\(route.testDescription) with \(credential.rawValue): \(status)" }
}

@Suite("Route rights, in process")
struct RouteRightsTests {
    static let rows: [RouteRow] = [
        RouteRow("PUT", "installations/{}", .listen),
        RouteRow("GET", "installations/{}", .listen),
        RouteRow("PATCH", "installations/{}", .listen),
        RouteRow("DELETE", "installations/{}", .listen),
        RouteRow("POST", "registrations", .listen),
        RouteRow("POST", "registrationIDs", .listen),
        RouteRow("GET", "registrations", .manage),
        RouteRow("GET", "registrations/{}", .listen),
        RouteRow("PUT", "registrations/{}", .listen),
        RouteRow("DELETE", "registrations/{}", .listen),
        RouteRow("GET", "tags/{}/registrations", .manage),
        RouteRow("POST", "jobs", .manage),
        RouteRow("GET", "jobs", .manage),
        RouteRow("GET", "jobs/{}", .manage),
        RouteRow("POST", "messages", .send),
        RouteRow("POST", "messages/$batch", .send),
        RouteRow("GET", "messages", .send),
        RouteRow("GET", "messages/{}", .send),
        RouteRow("POST", "schedulednotifications", .send),
        RouteRow("DELETE", "schedulednotifications/{}", .send),
        RouteRow("GET", "health", .manage),
        RouteRow("POST", "signatures", .keyItself),
        RouteRow("GET", "expressions/check", .send),
        RouteRow("GET", "pns", .manage),
        RouteRow("GET", "pns/browser/key", .listen),
        RouteRow("PUT", "pns/{}", .manage),
        RouteRow("DELETE", "pns/{}", .manage),
        RouteRow("POST", "users/tokens", .userCredential),
        RouteRow("GET", "users/me/notifications", .userToken),
        RouteRow("GET", "users/me/notifications/history", .userToken),
        RouteRow("GET", "users/me/notifications/stream", .streamToken),
        RouteRow("PATCH", "users/me/notifications/{}", .userToken),
        RouteRow("DELETE", "users/me/notifications/{}", .userToken),
        RouteRow("POST", "users/{}/notifications", .send),
        RouteRow("GET", "users/me/key", .userToken),
        RouteRow("PUT", "users/me/key", .userToken),
        RouteRow("POST", "users/me/pairing", .userToken),
        RouteRow("GET", "users/{}/key", .send),
    ]

    static let refusals: [Refusal] = rows.flatMap { row in
        Credential.weaker(than: row.right).map { Refusal(route: row, credential: $0.0, status: $0.1) }
    }

    static let admissions: [(RouteRow, Credential)] = rows.flatMap { row in Credential.enough(for: row.right).map { (row, $0) } }

    @Test("every route of the table is listed here, once, with the right the table gives it")
    func everyRouteIsListed() {
        let listed = Self.rows.map { "\($0.method) \($0.path)" }
        let table = RouteTable.routes.map { "\($0.method) \($0.pattern.joined(separator: "/"))" }
        #expect(Set(listed).count == listed.count)
        #expect(table.filter { !listed.contains($0) } == [], "routes with no row here")
        #expect(listed.filter { !table.contains($0) } == [], "rows with no route")
        for route in RouteTable.routes {
            let row = Self.rows.first { $0.method == route.method && $0.path == route.pattern.joined(separator: "/") }
            #expect(row?.right == route.right, "\(route.method) \(route.pattern.joined(separator: "/"))")
        }
    }

    @Test("a credential weaker than the route's right is refused, reaching no service but the sync store that checks users' tokens", arguments: refusals)
    func refused(_ refusal: Refusal) throws {
        let gateway = try RightsGateway()
        let response = gateway.request(refusal.route, refusal.credential)
        #expect(response.status == refusal.status, "\(response.text)")
        if refusal.status == 401 { #expect(response.text.hasPrefix("<Error><Code>401</Code><Detail>unauthorized: ")) }
        #expect(gateway.base.registry.calls.isEmpty && gateway.base.publish.calls.isEmpty && gateway.base.dispatch.calls.isEmpty)
        // A user's token or credential is the sync store's to check; every other refusal comes before it.
        if ![.userToken, .userCredential].contains(refusal.route.right) { #expect(gateway.base.sync.calls.isEmpty) }
    }

    @Test("the route's own right gets past the check", arguments: admissions)
    func admitted(_ route: RouteRow, _ credential: Credential) throws {
        let gateway = try RightsGateway()
        let response = gateway.request(route, credential)
        #expect(response.status != 401, "\(response.text)")
    }
}

/// The in-process gateway, with a sync store stand-in that checks user tokens and credentials as
/// the store does (`SyncHandlers`), and the credentials of `Credential` made for its keys.
struct RightsGateway {
    let base: Gateway

    init() throws {
        base = try Gateway()
        let context = base.context
        base.sync.on(UserTokenRequest.self) { request, _ in
            let claims: UserTokens.Claims
            do {
                claims = try context.userTokens.verify(request.credential, kind: .credential)
            } catch let error as AuthError {
                throw HubError(.unauthorized, error.message)
            }
            let (token, expiresAt) = context.userTokens.issue(user: claims.user, kind: .token, lifetime: 60)
            return UserToken(userId: claims.user, token: token, expiresAt: expiresAt)
        }
        base.sync.on(UserChangesRequest.self) { _, auth in
            _ = try context.authorizeUser(auth, hub: nil)
            return UserChanges(changes: [], cursor: 0, hasMore: false)
        }
        base.sync.on(UserHistoryRequest.self) { _, auth in
            _ = try context.authorizeUser(auth, hub: nil)
            return UserHistory(notifications: [], cursor: 0)
        }
        base.sync.on(UpdateUserNotificationState.self) { request, auth in
            _ = try context.authorizeUser(auth, hub: nil)
            throw HubError(.notFound, "no notification \(request.id)")
        }
        base.sync.on(DeleteUserNotification.self) { _, auth in
            _ = try context.authorizeUser(auth, hub: nil)
            return Ack()
        }
        base.sync.on(UserKeyRequest.self) { request, auth in
            // A backend's request names the user, and the gateway has checked its Send right.
            if request.userId == nil { _ = try context.authorizeUser(auth, hub: nil) }
            throw HubError(.notFound, "no key")
        }
        base.sync.on(PutUserKey.self) { _, auth in
            _ = try context.authorizeUser(auth, hub: nil)
            throw HubError(.invalidArgument, "no key")
        }
        base.sync.on(UserPairingRequest.self) { _, auth in
            _ = try context.authorizeUser(auth, hub: nil)
            throw HubError(.notFound, "no pairing")
        }
    }

    func request(_ route: RouteRow, _ credential: Credential) -> HTTPResponse {
        var headers: [String: String] = [:]
        var query = ["api-version": "2015-01"]
        var body = ""
        let users = base.context.userTokens
        switch credential {
        case .none: break
        case .listenKey: headers["Authorization"] = base.token(AccessKey.defaultListenName)
        case .sendKey: headers["Authorization"] = base.token(Gateway.sendName)
        case .manageKey: headers["Authorization"] = base.token()
        case .expiredManageKey: headers["Authorization"] = base.token(lifetime: -5)
        case .forgedManageKey:
            headers["Authorization"] = SharedAccessSignature.sign(
                resource: "http://\(Gateway.host)/hub", keyName: AccessKey.defaultFullName, key: Credential.forgedKey,
                expiry: Int(Date().timeIntervalSince1970) + 600)
        case .otherHubManageKey: headers["Authorization"] = base.token(resource: "http://\(Gateway.host)/other")
        case .userToken: headers["Authorization"] = "Bearer " + users.issue(user: "alice", kind: .token, lifetime: 600).token
        case .userTokenInQuery: query["access_token"] = users.issue(user: "alice", kind: .token, lifetime: 600).token
        case .expiredUserToken: headers["Authorization"] = "Bearer " + users.issue(user: "alice", kind: .token, lifetime: -5).token
        case .forgedUserToken: headers["Authorization"] = "Bearer " + Credential.forgedUser
        case .forgedUserTokenInQuery: query["access_token"] = Credential.forgedUser
        case .userCredentialAsToken: headers["Authorization"] = "Bearer " + users.issue(user: "alice", kind: .credential, lifetime: 600).token
        case .keyInBody, .wrongKeyInBody, .unknownKeyInBody:
            let key = base.keys.key(named: AccessKey.defaultFullName)!
            let name = credential == .unknownKeyInBody ? "Nobody" : key.name
            let secret = credential == .wrongKeyInBody ? Credential.forgedKey : key.key
            body = #"{"keyName":"\#(name)","key":"\#(secret)"}"#
        case .userCredential, .expiredUserCredential, .forgedUserCredential, .userTokenAsCredential:
            let credential: String = switch credential {
            case .userCredential: users.issue(user: "alice", kind: .credential, lifetime: 600).token
            case .expiredUserCredential: users.issue(user: "alice", kind: .credential, lifetime: -5).token
            case .userTokenAsCredential: users.issue(user: "alice", kind: .token, lifetime: 600).token
            default: Credential.forgedUser
            }
            body = #"{"credential":"\#(credential)"}"#
        }
        // A body the handler takes, where it reads one before the sync store checks the token.
        if route.method == "PATCH" && route.right == .userToken { body = #"{"readState":"read"}"# }
        if route.path == "users/me/pairing" { body = #"{"step":"get","code":"1234-5678"}"# }
        if route.method == "PUT" && route.path == "users/me/key" {
            body = #"{"p256dh":"x","auth":"x","devices":[],"devicesSignature":"x","recovery":{"publicKey":"x","auth":"x","record":"x"}}"#
        }
        let path = "/hub/" + route.path.replacingOccurrences(of: "{}", with: "x-1")
        return base.request(route.method, path, query: query, headers: headers, body: body, key: nil)
    }
}
