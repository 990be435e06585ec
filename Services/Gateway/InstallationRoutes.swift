import Auth
import Foundation
import Registrations
import HTTPServer
import HubProtocol

/// `/{hub}/installations/{id}`: a device's installation, as JSON. Writes are signed with the
/// caller's own key, so the registry grants exactly the caller's rights: who may set an
/// installation's user is decided there.
struct InstallationRoutes {
    let services: GatewayServices

    func put(_ id: String, _ request: HTTPRequest, key: AccessKey) throws -> HTTPResponse {
        var installation = try InstallationJSON.decode(request.body)
        guard installation.installationId == id else {
            throw HubError(.invalidArgument, "the body's installationId '\(installation.installationId)' is not the URL's '\(id)'")
        }
        installation.createdAt = nil
        installation.lastSeen = nil
        _ = try services.registry.call(
            InstallationUpsert(installation: installation, userToken: request.header("x-nh-user-token")), auth: services.token(for: key))
        return GatewayResponse.empty(200, headers: [("Content-Location", services.baseURL(request) + request.path)])
    }

    func get(_ id: String) throws -> HTTPResponse {
        let reply = try services.registry.call(InstallationGet(installationId: id))
        return GatewayResponse.json(200, try InstallationJSON.encode(reply.installation))
    }

    func patch(_ id: String, _ request: HTTPRequest, key: AccessKey) throws -> HTTPResponse {
        let operations = try InstallationJSON.patch(request.body)
        _ = try services.registry.call(
            InstallationPatch(installationId: id, operations: operations, userToken: request.header("x-nh-user-token")),
            auth: services.token(for: key))
        // The REST reference gives 204, but the service answers 200 and the .NET, Java and JS SDKs require it.
        return GatewayResponse.empty(200)
    }

    /// Deleting what is not there succeeds, as the service does: 204 for an installation, 200 for a
    /// registration (which is an installation in Azure's older shape).
    func delete(_ id: String, _ request: HTTPRequest, status: Int) throws -> HTTPResponse {
        do {
            _ = try services.registry.call(InstallationDelete(installationId: id, ifMatch: request.header("if-match")))
        } catch let error as HubError where error.code == .notFound {}
        return GatewayResponse.empty(status)
    }
}
