import Foundation
import Registrations
import HTTPServer
import HubProtocol

/// Installations shown as registrations, in the Atom entries and feeds the registrations API
/// answers: compact, each description in the order the .NET SDK reads it, with its ETag.
enum RegistrationFeed {
    static let namespace = RegistrationXML.namespace
    static let metadata = "http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"

    static func entryXML(_ installation: Installation, base: String) -> String {
        let id = GatewayResponse.escape(installation.installationId)
        let link = GatewayResponse.escape("\(base)/registrations/\(installation.installationId)?api-version=2020-06")
        let published = WireDate.format(installation.createdAt ?? Date())
        let updated = WireDate.format(installation.lastSeen ?? Date())
        return """
            <entry a:etag="W/&quot;\(installation.etag)&quot;" xmlns="http://www.w3.org/2005/Atom" xmlns:a="\(metadata)">\
            <id>\(link)</id><title type="text">\(id)</title><published>\(published)</published><updated>\(updated)</updated>\
            <link rel="self" href="\(link)"/><content type="application/xml">\(RegistrationXML.description(installation))</content></entry>
            """
    }

    static func entry(_ installation: Installation, base: String) -> HTTPResponse {
        HTTPResponse(
            status: 200,
            headers: [
                ("Content-Type", "application/atom+xml;type=entry;charset=utf-8"), ("ETag", "W/\"\(installation.etag)\""),
                ("Content-Location", "\(base)/registrations/\(installation.installationId)?api-version=2020-06"),
            ],
            body: Data(("<?xml version=\"1.0\" encoding=\"utf-8\"?>" + entryXML(installation, base: base)).utf8))
    }

    static func feed(_ page: InstallationPage, base: String) -> HTTPResponse {
        let entries = page.installations.map { entryXML($0, base: base) }.joined()
        let body = """
            <?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">\
            <title type="text">Registrations</title><id>\(GatewayResponse.escape(base))/registrations</id><updated>\(WireDate.format(Date()))</updated>\(entries)</feed>
            """
        var headers = [("Content-Type", "application/atom+xml;type=feed;charset=utf-8")]
        if let next = page.next { headers.append(("X-MS-ContinuationToken", next)) }
        return HTTPResponse(status: 200, headers: headers, body: Data(body.utf8))
    }
}
