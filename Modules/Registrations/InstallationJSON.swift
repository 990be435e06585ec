import Foundation
import HubProtocol

/// Installations as the REST API writes them, checked as strictly as the bus checks its messages.
public enum InstallationJSON {
    public static let fields: Set<String> = [
        "installationId", "platform", "pushChannel", "tags", "templates", "userId", "expirationTime",
        // Read-only fields the service returns; clients may send them back unchanged.
        "pushChannelExpired", "lastActiveOn", "lastUpdate", "createdAt", "lastSeen", "version",
    ]
    public static let templateFields: Set<String> = ["body", "tags", "expiry", "headers"]

    public static func decode(_ body: Data) throws -> Installation {
        // Most installations are read in one pass; one that needs more than checking (a browser's
        // subscription, a field left to its default) or that fails is read again below, which says why.
        if let installation = try? HubCodec.makeDecoder().decode(Checked.self, from: body).installation { return installation }
        guard let object = JSONValue.parse(body)?.objectValue else {
            throw HubError(.invalidPayload, "the body must be a JSON installation object")
        }
        for key in object.keys where !fields.contains(key) {
            throw HubError(.unknownField, "an installation has no field '\(key)'")
        }
        for (name, template) in object["templates"]?.objectValue ?? [:] {
            for key in (template.objectValue ?? [:]).keys where !templateFields.contains(key) {
                throw HubError(.unknownField, "template '\(name)' has no field '\(key)'")
            }
        }
        var cleaned = object
        for key in ["pushChannelExpired", "lastActiveOn", "lastUpdate", "createdAt", "lastSeen", "version"] { cleaned[key] = nil }
        // A browser subscription comes as an object (the REST reference, the JS SDK) or as a JSON
        // string holding one (the .NET and Java SDKs); either is kept as canonical JSON text, and
        // given back in the shape it came in.
        if let channel = object["pushChannel"]?.objectValue {
            cleaned["pushChannel"] = .string(try browserChannel(channel))
            cleaned["pushChannelObject"] = true
        } else if object["platform"]?.stringValue?.lowercased() == "browser", let text = object["pushChannel"]?.stringValue {
            guard let channel = JSONValue.parse(text)?.objectValue else {
                throw HubError(.invalidArgument, "a browser pushChannel is the subscription: {\"endpoint\": \"https://…\", \"p256dh\": \"…\", \"auth\": \"…\"}")
            }
            cleaned["pushChannel"] = .string(try browserChannel(channel))
        }
        if let platform = object["platform"]?.stringValue { cleaned["platform"] = .string(platform.lowercased()) }
        if cleaned["tags"] == nil { cleaned["tags"] = [] }
        if cleaned["platform"] == nil { cleaned["platform"] = "linux" }
        do {
            return try HubCodec.makeDecoder().decode(Installation.self, from: JSONValue.object(cleaned).encoded())
        } catch let error as DecodingError {
            throw HubError(.invalidPayload, "installation: \(HubCodec.describe(error))")
        }
    }

    /// An installation whose fields are all known and that needs nothing filled in or reshaped,
    /// checked and decoded in the one pass of its decoder; anything else throws.
    private struct Checked: Decodable {
        var installation: Installation

        private struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
        private struct Unchecked: Error {}

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Key.self)
            let keys = Set(container.allKeys.map(\.stringValue))
            guard keys.isSubset(of: fields), keys.contains("tags"), keys.contains("platform"),
                try container.decode(String.self, forKey: Key(stringValue: "platform")).lowercased() != Platform.browser.rawValue
            else { throw Unchecked() }
            if keys.contains("templates") {
                let templates = try container.nestedContainer(keyedBy: Key.self, forKey: Key(stringValue: "templates"))
                for name in templates.allKeys {
                    let template = try templates.nestedContainer(keyedBy: Key.self, forKey: name)
                    guard Set(template.allKeys.map(\.stringValue)).isSubset(of: templateFields) else { throw Unchecked() }
                }
            }
            installation = try Installation(from: decoder)
            installation.platform = installation.platform.lowercased()
            (installation.createdAt, installation.lastSeen, installation.version) = (nil, nil, nil)
        }
    }

    /// A browser's subscription goes back in the shape it was written in: the object the REST
    /// reference and the JS SDK's `BrowserPushChannel` read, or the JSON string .NET's and Java's
    /// SDKs read.
    public static func encode(_ installation: Installation) throws -> Data {
        var plain = installation
        plain.pushChannelObject = nil
        let data = try HubCodec.makeEncoder().encode(plain)
        guard installation.pushChannelObject == true, var object = JSONValue.parse(data)?.objectValue,
            let channel = JSONValue.parse(installation.pushChannel), channel.objectValue != nil
        else { return data }
        object["pushChannel"] = channel
        return try JSONValue.object(object).encoded()
    }

    /// A Web Push subscription, `{"endpoint": "https://…", "p256dh": "…", "auth": "…"}`, checked
    /// and kept as canonical JSON text in the installation's push channel.
    public static func browserChannel(_ channel: [String: JSONValue]) throws -> String {
        for key in channel.keys where !["endpoint", "p256dh", "auth"].contains(key) {
            throw HubError(.unknownField, "a browser pushChannel has endpoint, p256dh and auth, not '\(key)'")
        }
        guard let endpoint = channel["endpoint"]?.stringValue, let url = URL(string: endpoint), url.scheme == "https", url.host != nil else {
            throw HubError(.invalidArgument, "a browser pushChannel needs 'endpoint', the subscription's https:// URL")
        }
        var canonical: [String: JSONValue] = ["endpoint": .string(endpoint)]
        for key in ["p256dh", "auth"] {
            guard let text = channel[key]?.stringValue, !text.isEmpty,
                text.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "=")
                    || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "/") || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) })
            else {
                throw HubError(.invalidArgument, "a browser pushChannel needs '\(key)', the subscription's key in base64url")
            }
            canonical[key] = .string(text)
        }
        return String(decoding: try JSONValue.object(canonical).encoded(), as: UTF8.self)
    }

    /// A subscription given as its three texts, such as from headers or XML elements.
    public static func browserChannel(endpoint: String, p256dh: String, auth: String) throws -> String {
        try browserChannel(["endpoint": .string(endpoint), "p256dh": .string(p256dh), "auth": .string(auth)])
    }

    /// A JSON Patch document (RFC 6902): an array of {op, path, value}.
    public static func patch(_ body: Data) throws -> [PatchOperation] {
        guard let items = JSONValue.parse(body)?.arrayValue, items.allSatisfy({ $0.objectValue != nil }) else {
            throw HubError(.invalidPayload, "a patch is a JSON array of operations such as {\"op\":\"add\",\"path\":\"/tags\",\"value\":\"World\"}")
        }
        do {
            var operations = try HubCodec.makeDecoder().decode([PatchOperation].self, from: body)
            // A browser's subscription may be patched in as an object, and is then given back as one;
            // patched in as a string, as a string.
            for index in operations.indices.reversed() where operations[index].path == "/pushChannel" && operations[index].op != "remove" {
                var object = false
                if case .object(let members)? = operations[index].value {
                    operations[index].value = .string(try browserChannel(members))
                    object = true
                }
                operations.insert(PatchOperation(op: "replace", path: "/pushChannelObject", value: .bool(object)), at: index + 1)
            }
            return operations
        } catch let error as DecodingError {
            throw HubError(.invalidPayload, "patch: \(HubCodec.describe(error))")
        }
    }
}
