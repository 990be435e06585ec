import Auth
import Foundation
import Registrations
import HTTPServer
import HubProtocol

/// `/{hub}/registrations`: installations in Azure's older shape, as Atom entries and feeds.
struct RegistrationRoutes {
    let services: GatewayServices

    /// Registration ids in the shape Azure gives them: two random numbers and a counter.
    static func newRegistrationId() -> String { RegistrationXML.newRegistrationId() }

    func newRegistrationId(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = Self.newRegistrationId()
        return GatewayResponse.empty(201, headers: [
            ("Location", "\(services.hubURL(request))/registrationids/\(id)?api-version=2020-06"),
            ("Content-Location", "\(services.hubURL(request))/registrations/\(id)?api-version=2020-06"),
        ])
    }

    func get(_ id: String, _ request: HTTPRequest) throws -> HTTPResponse {
        let reply = try services.registry.call(InstallationGet(installationId: id))
        return RegistrationFeed.entry(reply.installation, base: services.hubURL(request))
    }

    /// Creates or replaces the registration (an installation) from an Atom entry; with If-Match,
    /// only when the stored one still has that ETag. The user an installation has stays its user.
    /// Signed with the caller's own key, as an installation's write is.
    func save(_ id: String, _ request: HTTPRequest, key: AccessKey) throws -> HTTPResponse {
        var installation = try RegistrationXML.installation(RegistrationXML.parse(request.body), id: id)
        // Only a registration that is not there has no user to keep; a failed read fails the save.
        do {
            installation.userId = try services.registry.call(InstallationGet(installationId: id)).installation.userId
        } catch let error as HubError where error.code == .notFound {}
        let saved = try services.registry.call(
            InstallationUpsert(installation: installation, ifMatch: request.header("if-match")), auth: services.token(for: key))
        return RegistrationFeed.entry(saved.installation, base: services.hubURL(request))
    }

    /// A page of registrations as Atom, with `$top` (default 100, at most 1,000), the continuation
    /// token in `X-MS-ContinuationToken` or `?ContinuationToken=`, and an optional `$filter`.
    func list(_ request: HTTPRequest, tag: String?) throws -> HTTPResponse {
        var top = 100
        if let text = request.query["$top"] {
            guard let value = Int(text), (1...1000).contains(value) else {
                throw HubError(.invalidArgument, "$top '\(text)' must be a whole number from 1 to 1000")
            }
            top = value
        }
        let after = request.header("x-ms-continuationtoken") ?? request.query["ContinuationToken"] ?? request.query["continuationtoken"]
        var list = InstallationList(tag: tag, limit: top, after: after)
        let base = services.hubURL(request)
        if let text = request.query["$filter"] {
            switch try RegistrationFilter.parse(text) {
            case .pushChannel(let channel):
                list.pushChannel = channel
            case .registrationId(let id):
                var found: [Installation] = []
                do {
                    let installation = try services.registry.call(InstallationGet(installationId: id)).installation
                    if tag == nil || installation.tags.contains(tag!) { found = [installation] }
                } catch let error as HubError where error.code == .notFound {}
                return RegistrationFeed.feed(InstallationPage(installations: found), base: base)
            }
        }
        return RegistrationFeed.feed(try services.registry.call(list), base: base)
    }
}
