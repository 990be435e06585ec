import Foundation
import HTTPServer
import HubProtocol

/// `/{hub}/pns`: the credentials of the push services the dispatcher delivers to, and the VAPID
/// key web apps subscribe with.
struct PushServiceRoutes {
    let services: GatewayServices

    /// `GET /{hub}/pns`: the push services the dispatcher delivers to, without their secrets.
    func credentials() throws -> HTTPResponse {
        GatewayJSON.response(200, try services.dispatch.call(PushCredentialsRequest(), auth: nil))
    }

    /// `GET /{hub}/pns/browser/key`: the VAPID public key a web app subscribes with
    /// (`applicationServerKey`).
    func vapidKey() throws -> HTTPResponse {
        let reply = try services.dispatch.call(PushCredentialsRequest(), auth: nil)
        guard let key = reply.services.first(where: { $0.service == PushServiceName.browser })?.publicKey else {
            throw HubError(.notFound, "Web Push is not configured; set push.browser.subject, or PUT /\(services.hub)/pns/browser")
        }
        return GatewayJSON.response(200, GatewayJSON.VAPIDKey(publicKey: key))
    }

    /// `PUT /{hub}/pns/{apple|fcm|browser}`: one push service's credentials, checked by the
    /// dispatcher before they are kept. A key travels as its text (`key`, `serviceAccount`).
    func setCredentials(_ service: String, _ request: HTTPRequest) throws -> HTTPResponse {
        try Self.checkName(service)
        guard var body = JSONValue.parse(request.body)?.objectValue else {
            throw HubError(.invalidPayload, "the body must be a JSON object with the \(service) credentials")
        }
        // A service account may come as the object Google issues, or as its text.
        if service == "fcm", let account = body["serviceAccount"], account.stringValue == nil {
            body["serviceAccount"] = .string(String(decoding: try account.encoded(), as: UTF8.self))
        }
        let wrapped = try JSONValue.object([service: .object(body)]).encoded()
        let set = try GatewayJSON.decode(PushCredentialsSetRequest.self, wrapped, "the \(service) credentials as a JSON object")
        return GatewayJSON.response(200, try services.dispatch.call(set, auth: nil))
    }

    /// `DELETE /{hub}/pns/{service}`: removes credentials set over the bus or REST.
    func removeCredentials(_ service: String) throws -> HTTPResponse {
        try Self.checkName(service)
        return GatewayJSON.response(200, try services.dispatch.call(PushCredentialsSetRequest(remove: [service]), auth: nil))
    }

    private static func checkName(_ service: String) throws {
        guard PushServiceName.all.contains(service) else {
            throw HubError(.notFound, "'\(service)' is not a push service; use \(PushServiceName.all.joined(separator: ", "))")
        }
    }
}
