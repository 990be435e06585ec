import Foundation
import HTTPServer
import HubProtocol

/// Installations shown as registrations, in the Atom feed the registrations API returns.
enum RegistrationFeed {
    static let namespace = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"

    static func description(_ installation: Installation) -> String {
        let tags = GatewayResponse.escape(installation.tags.joined(separator: ","))
        let expiry = installation.expirationTime.map { "<ExpirationTime>\(WireDate.format($0))</ExpirationTime>" } ?? ""
        let templates = (installation.templates ?? [:]).sorted { $0.key < $1.key }.map { name, template in
            "<Template><TemplateName>\(GatewayResponse.escape(name))</TemplateName><BodyTemplate><![CDATA[\(template.body)]]></BodyTemplate></Template>"
        }.joined()
        return """
            <LinuxRegistrationDescription xmlns="\(namespace)" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">\
            \(expiry)<RegistrationId>\(GatewayResponse.escape(installation.installationId))</RegistrationId>\
            <Tags>\(tags)</Tags><DeviceHandle>\(GatewayResponse.escape(installation.pushChannel))</DeviceHandle>\(templates)\
            </LinuxRegistrationDescription>
            """
    }

    static func entryXML(_ installation: Installation, base: String) -> String {
        let id = GatewayResponse.escape(installation.installationId)
        return """
            <entry xmlns="http://www.w3.org/2005/Atom"><id>\(base)/registrations/\(id)</id><title type="text">\(id)</title>\
            <updated>\(WireDate.format(installation.lastSeen ?? Date()))</updated>\
            <content type="application/xml">\(description(installation))</content></entry>
            """
    }

    static func entry(_ installation: Installation, base: String) -> HTTPResponse {
        HTTPResponse(
            status: 200, headers: [("Content-Type", "application/atom+xml;type=entry;charset=utf-8")],
            body: Data(("<?xml version=\"1.0\" encoding=\"utf-8\"?>" + entryXML(installation, base: base)).utf8))
    }

    static func feed(_ page: InstallationPage, base: String) -> HTTPResponse {
        let entries = page.installations.map { entryXML($0, base: base) }.joined()
        let body = """
            <?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">\
            <title type="text">Registrations</title><id>\(base)/registrations</id><updated>\(WireDate.format(Date()))</updated>\(entries)</feed>
            """
        var headers = [("Content-Type", "application/atom+xml;type=feed;charset=utf-8")]
        if let next = page.next { headers.append(("X-MS-ContinuationToken", next)) }
        return HTTPResponse(status: 200, headers: headers, body: Data(body.utf8))
    }
}
