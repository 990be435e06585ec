import Auth
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit

/// `/$namespace/notificationHubs/…`: the namespace's hubs and their authorization rules over REST,
/// in the shape of Azure's resource manager API for `Microsoft.NotificationHubs/namespaces/
/// notificationHubs` (its paths after the namespace, its JSON, its `listKeys` and
/// `regenerateKeys`), signed with a namespace key (`namespace-keys.json`), as Azure's needs the
/// namespace's rights, never a hub's own.
///
/// | here | Azure (`…/namespaces/{ns}` on management.azure.com) |
/// | --- | --- |
/// | `GET /$namespace/notificationHubs` | `GET …/notificationHubs` |
/// | `PUT /$namespace/notificationHubs/{hub}` | `PUT …/notificationHubs/{hub}` |
/// | `GET`, `DELETE /$namespace/notificationHubs/{hub}` | the same |
/// | `GET /$namespace/notificationHubs/{hub}/authorizationRules` | the same |
/// | `PUT`, `DELETE …/authorizationRules/{rule}` (`{"properties":{"rights":["Listen"]}}`) | the same |
/// | `POST …/authorizationRules/{rule}/listKeys` | the same |
/// | `POST …/authorizationRules/{rule}/regenerateKeys` (`{"policyKey":"PrimaryKey"}`) | the same |
struct NamespaceRoutes {
    let services: GatewayServices
    static let segment = "$namespace"

    /// After a change to the hub catalog, waits (at most 3 s) until the services this gateway
    /// calls, and the gateway itself, have read it: a hub made, or a key put, is then found by the
    /// next request whichever service it reaches.
    func settle() {
        guard let version = HubCatalogSettling.version(of: services.registry) else { return }
        let late = HubCatalogSettling.wait(
            for: version, services: [("nh-publish", services.publish), ("nh-sync", services.sync), ("nh-dispatch", services.dispatch)])
        let deadline = Date().addingTimeInterval(3)
        while (services.context.hubs.version ?? 0) < version && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        let gatewayLate = (services.context.hubs.version ?? 0) < version
        if !late.isEmpty || gatewayLate {
            services.context.logger.warning(
                "a change to the hub catalog is not yet read everywhere; it will be within a second",
                ("version", "\(version)"), ("late", (late + (gatewayLate ? ["nh-gateway"] : [])).joined(separator: ",")))
        }
    }

    func handle(_ request: HTTPRequest, _ segments: [String]) throws -> HTTPResponse {
        try authorize(request)
        let registry = services.registry
        switch (request.method, segments.count, segments.first) {
        case ("GET", 1, "notificationHubs"):
            let hubs = try registry.call(HubListRequest()).hubs
            return GatewayJSON.response(200, ResourceList(value: hubs.map { Resource(summary: $0, services: services, request: request) }))
        case (_, 2, "notificationHubs"):
            let name = segments[1]
            switch request.method {
            case "PUT":
                do {
                    let hub = try registry.call(HubCreate(name: name))
                    settle()
                    return GatewayJSON.response(201, Resource(hub, services: services, request: request))
                } catch let error as HubError where error.code == .conflict {
                    return GatewayJSON.response(200, Resource(try registry.call(HubGet(name: name)), services: services, request: request))
                }
            case "GET":
                return GatewayJSON.response(200, Resource(try registry.call(HubGet(name: name)), services: services, request: request))
            case "DELETE":
                _ = try registry.call(HubDelete(name: name))
                return GatewayResponse.empty(200)
            default:
                throw HubError(.invalidArgument, "\(request.method) is not supported on \(request.path); use GET, PUT or DELETE")
            }
        case ("GET", 3, "notificationHubs") where segments[2] == "authorizationRules":
            let hub = try registry.call(HubGet(name: segments[1]))
            return GatewayJSON.response(200, RuleList(value: hub.policies.map { Rule($0, hub: hub.name) }))
        case (_, 4, "notificationHubs") where segments[2] == "authorizationRules":
            let (hub, rule) = (segments[1], segments[3])
            switch request.method {
            case "PUT":
                let body = try GatewayJSON.decode(RuleBody.self, request.body, #"a JSON object such as {"properties":{"rights":["Listen","Send"]}}"#)
                let put = try registry.call(HubPolicyPut(hub: hub, name: rule, rights: body.properties.rights))
                settle()
                return GatewayJSON.response(200, Rule(put, hub: hub))
            case "GET":
                let found = try registry.call(HubGet(name: hub)).policies.first { $0.name == rule }
                guard let found else { throw HubError(.notFound, "hub '\(hub)' has no authorization rule '\(rule)'") }
                return GatewayJSON.response(200, Rule(found, hub: hub))
            case "DELETE":
                _ = try registry.call(HubPolicyDelete(hub: hub, name: rule))
                return GatewayResponse.empty(200)
            default:
                throw HubError(.invalidArgument, "\(request.method) is not supported on \(request.path)")
            }
        case ("POST", 5, "notificationHubs") where segments[2] == "authorizationRules" && segments[4] == "listKeys":
            let found = try registry.call(HubGet(name: segments[1])).policies.first { $0.name == segments[3] }
            guard let found else { throw HubError(.notFound, "hub '\(segments[1])' has no authorization rule '\(segments[3])'") }
            return GatewayJSON.response(200, ListKeys(found, hub: segments[1], namespace: services.baseURL(request) + "/"))
        case ("POST", 5, "notificationHubs") where segments[2] == "authorizationRules" && segments[4] == "regenerateKeys":
            let body = try GatewayJSON.decode(RegenerateBody.self, request.body, #"a JSON object such as {"policyKey":"PrimaryKey"}"#)
            let policy = try registry.call(HubKeysRegenerate(hub: segments[1], name: segments[3], policyKey: body.policyKey))
            settle()
            return GatewayJSON.response(200, ListKeys(policy, hub: segments[1], namespace: services.baseURL(request) + "/"))
        default:
            throw HubError(.notFound, "no resource at \(request.path); the namespace's are /$namespace/notificationHubs[/{hub}[/authorizationRules[/{rule}[/listKeys|/regenerateKeys]]]]")
        }
    }

    /// A namespace key's signature over the request's URL, with Manage.
    private func authorize(_ request: HTTPRequest) throws {
        guard let header = request.header("authorization") else {
            throw HubError(.unauthorized, "no Authorization header; sign with a namespace key (RootManageSharedAccessKey, nhctl keys)")
        }
        let key: AccessKey
        do {
            key = try services.context.hubs.namespaceKeys.authorize(header, resource: services.baseURL(request) + request.path, needs: .manage)
        } catch {
            throw HubError(.unauthorized, error.message + "; hubs are managed with a namespace key (RootManageSharedAccessKey, nhctl keys)")
        }
        try services.context.takeRate(of: key)
    }

    // MARK: Shapes, as Azure's resource manager writes them

    struct ResourceList: Encodable { var value: [Resource] }

    struct Resource: Encodable {
        var id: String
        var name: String
        var type = "Microsoft.NotificationHubs/namespaces/notificationHubs"
        var properties: Properties

        struct Properties: Encodable {
            var name: String
            var createdAt: Date?
            var isDefault: Bool?
            var installations: Int?
            var authorizationRules: [Rule.Properties]?
        }

        init(summary: HubSummary, services: GatewayServices, request: HTTPRequest) {
            id = "/$namespace/notificationHubs/\(summary.name)"
            name = summary.name
            properties = Properties(name: summary.name, createdAt: summary.createdAt, isDefault: summary.isDefault, installations: summary.installations)
        }

        init(_ hub: HubDescription, services: GatewayServices, request: HTTPRequest) {
            id = "/$namespace/notificationHubs/\(hub.name)"
            name = hub.name
            properties = Properties(name: hub.name, createdAt: hub.createdAt, authorizationRules: hub.policies.map { Rule($0, hub: hub.name).properties })
        }
    }

    struct RuleList: Encodable { var value: [Rule] }

    struct Rule: Encodable {
        var id: String
        var name: String
        var type = "Microsoft.NotificationHubs/namespaces/notificationHubs/authorizationRules"
        var properties: Properties

        struct Properties: Encodable {
            var keyName: String
            var rights: [String]
        }

        init(_ policy: HubPolicy, hub: String) {
            id = "/$namespace/notificationHubs/\(hub)/authorizationRules/\(policy.name)"
            name = policy.name
            properties = Properties(keyName: policy.name, rights: policy.rights)
        }
    }

    /// As Azure's `ResourceListKeys`.
    struct ListKeys: Encodable {
        var keyName: String
        var primaryKey: String
        var secondaryKey: String
        var primaryConnectionString: String
        var secondaryConnectionString: String

        init(_ policy: HubPolicy, hub: String, namespace: String) {
            keyName = policy.name
            primaryKey = policy.key
            secondaryKey = policy.secondaryKey ?? policy.key
            (primaryConnectionString, secondaryConnectionString) = policy.connectionStrings(endpoint: namespace, hub: hub)
        }
    }

    struct RuleBody: HubMessage {
        static let messageType: MessageType = "rest.authorizationRule"
        var properties: RuleProperties
    }

    struct RuleProperties: Codable, Sendable, Equatable { var rights: [String] }

    struct RegenerateBody: HubMessage {
        static let messageType: MessageType = "rest.regenerateKeys"
        var policyKey: String
    }
}
