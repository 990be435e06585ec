import Foundation
import HubProtocol

/// Installations as the REST API writes them, checked as strictly as the bus checks its messages.
enum InstallationJSON {
    static let fields: Set<String> = [
        "installationId", "platform", "pushChannel", "tags", "templates", "userId", "expirationTime",
        // Read-only fields the service returns; clients may send them back unchanged.
        "pushChannelExpired", "lastActiveOn", "lastUpdate", "createdAt", "lastSeen",
    ]
    static let templateFields: Set<String> = ["body", "tags", "expiry", "headers"]

    static func decode(_ body: Data) throws -> Installation {
        guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else {
            throw HubError(.invalidPayload, "the body must be a JSON installation object")
        }
        for key in object.keys where !fields.contains(key) {
            throw HubError(.unknownField, "an installation has no field '\(key)'")
        }
        for (name, template) in object["templates"] as? [String: Any] ?? [:] {
            for key in (template as? [String: Any] ?? [:]).keys where !templateFields.contains(key) {
                throw HubError(.unknownField, "template '\(name)' has no field '\(key)'")
            }
        }
        var cleaned = object
        for key in ["pushChannelExpired", "lastActiveOn", "lastUpdate", "createdAt", "lastSeen"] { cleaned[key] = nil }
        if cleaned["tags"] == nil { cleaned["tags"] = [String]() }
        if cleaned["platform"] == nil { cleaned["platform"] = "linux" }
        do {
            return try HubCodec.makeDecoder().decode(Installation.self, from: JSONSerialization.data(withJSONObject: cleaned))
        } catch let error as DecodingError {
            throw HubError(.invalidPayload, "installation: \(HubCodec.describe(error))")
        }
    }

    static func encode(_ installation: Installation) throws -> Data {
        try HubCodec.makeEncoder().encode(installation)
    }

    /// A JSON Patch document (RFC 6902): an array of {op, path, value}.
    static func patch(_ body: Data) throws -> [PatchOperation] {
        guard (try? JSONSerialization.jsonObject(with: body)) is [[String: Any]] else {
            throw HubError(.invalidPayload, "a patch is a JSON array of operations such as {\"op\":\"add\",\"path\":\"/tags\",\"value\":\"World\"}")
        }
        do {
            return try HubCodec.makeDecoder().decode([PatchOperation].self, from: body)
        } catch let error as DecodingError {
            throw HubError(.invalidPayload, "patch: \(HubCodec.describe(error))")
        }
    }
}
