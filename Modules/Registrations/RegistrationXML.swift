import Foundation
import FoundationXML
import HubProtocol

/// Registrations as the registrations API reads and writes them: an Atom entry whose content is a
/// `…RegistrationDescription` of one platform, native or with one template. A registration is an
/// installation here, its registration id the installation id, so the two APIs see the same devices.
public enum RegistrationXML {
    /// The platform of each description type, and the element that carries its handle.
    public struct Kind: Sendable {
        public let name: String
        public let platform: Platform
        public let handleFields: [String]
    }

    public static let kinds: [Kind] = [
        Kind(name: "Apple", platform: .apns, handleFields: ["DeviceToken"]),
        Kind(name: "Gcm", platform: .gcm, handleFields: ["GcmRegistrationId"]),
        Kind(name: "Fcm", platform: .gcm, handleFields: ["FcmRegistrationId"]),
        Kind(name: "FcmV1", platform: .fcmv1, handleFields: ["FcmV1RegistrationId"]),
        Kind(name: "Windows", platform: .wns, handleFields: ["ChannelUri"]),
        Kind(name: "Adm", platform: .adm, handleFields: ["AdmRegistrationId"]),
        Kind(name: "Baidu", platform: .baidu, handleFields: ["BaiduUserId", "BaiduChannelId"]),
        Kind(name: "Browser", platform: .browser, handleFields: ["Endpoint", "P256DH", "Auth"]),
        Kind(name: "Linux", platform: .linux, handleFields: ["DeviceHandle"]),
    ]

    public static let defaultTemplateName = "template"
    /// The namespace of Notification Hubs' descriptions.
    public static let namespace = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"

    /// Text as XML character data or an attribute value.
    public static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }

    /// Registration ids in the shape Azure gives them: two random numbers and a counter.
    public static func newRegistrationId() -> String {
        "\(UInt64.random(in: 1..<UInt64.max))-\(UInt64.random(in: 1..<UInt64.max))-1"
    }

    // MARK: Reading

    /// The fields of the description in an entry, by element name; headers as name → value.
    public struct Description {
        public var type = ""
        public var fields: [String: String] = [:]
        public var headers: [String: String] = [:]
    }

    /// Reads the description in an Atom entry: `<AppleRegistrationDescription>`, or the .NET SDK's
    /// `<RegistrationDescription i:type="…">`, its fields in any order, `i:nil` ones left out.
    public static func parse(_ body: Data) throws -> Description {
        let reader = Reader()
        let parser = XMLParser(data: body)
        parser.shouldProcessNamespaces = true
        parser.shouldResolveExternalEntities = false
        parser.delegate = reader
        guard parser.parse(), reader.failure == nil else {
            throw HubError(
                .invalidPayload,
                reader.failure ?? "the body is not XML: \(parser.parserError.map { "\($0.localizedDescription)" } ?? "a parse error") at line \(parser.lineNumber); send an Atom entry with a …RegistrationDescription")
        }
        guard !reader.found.type.isEmpty else {
            throw HubError(.invalidPayload, "the body needs <entry><content type=\"application/xml\"> with a registration description, such as <AppleRegistrationDescription>")
        }
        return reader.found
    }

    final class Reader: NSObject, XMLParserDelegate {
        var found = Description()
        var failure: String?
        private var path: [String] = []
        private var text = ""
        private var isNil = false
        private var header: (name: String?, value: String?) = (nil, nil)
        private var descriptionDepth: Int?

        func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                    attributes: [String: String] = [:]) {
            path.append(name)
            text = ""
            isNil = attributes.first { $0.key.hasSuffix("nil") }?.value == "true"
            if descriptionDepth == nil, path.count >= 2, path[path.count - 2] == "content" {
                guard name.hasSuffix("RegistrationDescription") else {
                    failure = "<\(name)> is not a registration description; use one such as <AppleRegistrationDescription>"
                    parser.abortParsing()
                    return
                }
                descriptionDepth = path.count
                let declared = attributes.first { $0.key.hasSuffix("type") && $0.key != "type" }?.value
                found.type = name == "RegistrationDescription" ? (declared ?? "") : name
            }
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }
        func parser(_ parser: XMLParser, foundCDATA block: Data) { text += String(decoding: block, as: UTF8.self) }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            defer {
                path.removeLast()
                text = ""
            }
            guard let depth = descriptionDepth, path.count > depth else { return }
            if path.count == depth + 1 {
                if !isNil && !name.hasSuffix("Headers") { found.fields[name] = text }
            } else if name == "Header" {
                header.name = text.trimmingCharacters(in: .whitespacesAndNewlines)
            } else if name == "Value" {
                header.value = text
            } else if name.hasSuffix("Header"), let headerName = header.name {
                found.headers[headerName] = header.value ?? ""
                header = (nil, nil)
            }
            isNil = false
        }
    }

    /// The installation a registration description stands for.
    public static func installation(_ description: Description, id: String) throws -> Installation {
        var type = description.type
        guard type.hasSuffix("RegistrationDescription") else {
            throw HubError(.invalidPayload, "'\(type)' is not a registration description")
        }
        type.removeLast("RegistrationDescription".count)
        let isTemplate = type.hasSuffix("Template")
        if isTemplate { type.removeLast("Template".count) }
        guard let kind = kinds.first(where: { $0.name == type }) else {
            throw HubError(
                .invalidArgument,
                "\(description.type) is not a registration this hub takes; use \(kinds.map { "\($0.name)RegistrationDescription" }.joined(separator: ", ")) or their Template forms")
        }
        let fields = description.fields
        var handles: [String] = []
        for field in kind.handleFields {
            guard let value = fields[field]?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty else {
                throw HubError(.invalidArgument, "\(description.type) needs <\(field)>")
            }
            handles.append(value)
        }
        let pushChannel: String
        switch kind.platform {
        case .baidu: pushChannel = "\(handles[0])-\(handles[1])"
        case .browser:
            pushChannel = try InstallationJSON.browserChannel(endpoint: handles[0], p256dh: handles[1], auth: handles[2])
        default: pushChannel = handles[0]
        }
        let tags = (fields["Tags"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        var installation = Installation(installationId: id, platform: kind.platform.rawValue, pushChannel: pushChannel, tags: tags)
        if isTemplate {
            guard let body = fields["BodyTemplate"], !body.isEmpty else {
                throw HubError(.invalidTemplate, "\(description.type) needs <BodyTemplate>")
            }
            let name = templateName(fields["TemplateName"])
            installation.templates = [name: InstallationTemplate(
                body: body, expiry: fields["Expiry"], tags: nil, headers: description.headers.isEmpty ? nil : description.headers)]
        }
        return installation
    }

    /// A template name as the hub keeps it: characters outside A–Z a–z 0–9 _ @ # . : - become _.
    public static func templateName(_ given: String?) -> String {
        guard let given, !given.isEmpty else { return defaultTemplateName }
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@#.:-")
        return String(given.prefix(64).map { allowed.contains($0) ? $0 : "_" })
    }

    // MARK: Writing

    /// The description of an installation, its members in the order the .NET SDK reads them. An
    /// installation with several templates shows its first (by name), as one registration.
    public static func description(_ installation: Installation) -> String {
        let escape = RegistrationXML.escape
        let platform = Platform(name: installation.platform) ?? .linux
        let kind = kinds.first { $0.platform == platform && $0.name != "Fcm" } ?? kinds.last!
        let template = (installation.templates ?? [:]).sorted { $0.key < $1.key }.first
        let type = "\(kind.name)\(template == nil ? "" : "Template")RegistrationDescription"
        var xml = #"<\#(type) xmlns="\#(RegistrationXML.namespace)" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">"#
        xml += "<ETag>\(installation.etag)</ETag>"
        if let expiry = installation.expirationTime { xml += "<ExpirationTime>\(WireDate.format(expiry))</ExpirationTime>" }
        xml += "<RegistrationId>\(escape(installation.installationId))</RegistrationId>"
        if !installation.tags.isEmpty { xml += "<Tags>\(escape(installation.tags.joined(separator: ",")))</Tags>" }
        let channel = installation.pushChannel
        switch platform {
        case .baidu:
            let parts = channel.split(separator: "-", maxSplits: 1).map(String.init)
            xml += "<BaiduUserId>\(escape(parts.first ?? ""))</BaiduUserId><BaiduChannelId>\(escape(parts.count > 1 ? parts[1] : ""))</BaiduChannelId>"
        case .browser:
            let object = JSONValue.parse(channel)
            func member(_ name: String) -> String { escape(object?[name]?.stringValue ?? "") }
            xml += "<Endpoint>\(member("endpoint"))</Endpoint><P256DH>\(member("p256dh"))</P256DH><Auth>\(member("auth"))</Auth>"
        default:
            xml += "<\(kind.handleFields[0])>\(escape(channel))</\(kind.handleFields[0])>"
        }
        if let (name, template) = template {
            let body = "<BodyTemplate><![CDATA[\(template.body.replacingOccurrences(of: "]]>", with: "]]]]><![CDATA[>"))]]></BodyTemplate>"
            let headers = (template.headers ?? [:]).sorted { $0.key < $1.key }
            switch platform {
            case .apns:
                xml += body
                if let expiry = template.expiry { xml += "<Expiry>\(escape(expiry))</Expiry>" }
                xml += "<TemplateName>\(escape(name))</TemplateName>"
                xml += "<ApnsHeaders>" + headers.map { "<ApnsHeader><Header>\(escape($0.key))</Header><Value>\(escape($0.value))</Value></ApnsHeader>" }.joined() + "</ApnsHeaders>"
            case .wns:
                xml += body
                xml += "<WnsHeaders>" + headers.map { "<WnsHeader><Header>\(escape($0.key))</Header><Value>\(escape($0.value))</Value></WnsHeader>" }.joined() + "</WnsHeaders>"
                xml += "<TemplateName>\(escape(name))</TemplateName>"
            default:
                xml += body + "<TemplateName>\(escape(name))</TemplateName>"
            }
        }
        return xml + "</\(type)>"
    }
}
