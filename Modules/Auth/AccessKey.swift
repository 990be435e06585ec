import Foundation

/// A named shared-access policy and its rights, with a primary key and, where it has one, a
/// secondary key: either signs, so one can be regenerated while clients move to the other.
public struct AccessKey: Codable, Sendable, Equatable {
    public var name: String
    public var key: String
    public var rights: AccessRights
    /// Absent in a `keys.json` written before policies had two keys.
    public var secondaryKey: String?

    public init(name: String, key: String, rights: AccessRights, secondaryKey: String? = nil) {
        self.name = name
        self.key = key
        self.rights = rights
        self.secondaryKey = secondaryKey
    }

    /// The policy's keys: the primary, then the secondary where there is one.
    public var signingKeys: [String] { secondaryKey.map { [key, $0] } ?? [key] }

    public static let defaultListenName = "DefaultListenSharedAccessSignature"
    public static let defaultFullName = "DefaultFullSharedAccessSignature"

    /// A new key: 32 random bytes in base64, as the service generates them.
    public static func generate(name: String, rights: AccessRights) -> AccessKey {
        AccessKey(name: name, key: newKey(), rights: rights, secondaryKey: newKey())
    }

    /// A new key: 32 random bytes in base64.
    public static func newKey() -> String { Crypto.randomBytes(32).base64EncodedString() }

    /// The namespace's own policy, which can make hubs and reach every hub.
    public static let rootManageName = "RootManageSharedAccessKey"

    /// `Endpoint=<endpoint>;SharedAccessKeyName=<name>;SharedAccessKey=<key>`, with
    /// `;EntityPath=<hub>` when a hub is named (as the SDKs' connection strings of a hub have it).
    public func connectionString(endpoint: String, hub: String? = nil, secondary: Bool = false) -> String {
        "Endpoint=\(endpoint);SharedAccessKeyName=\(name);SharedAccessKey=\(secondary ? secondaryKey ?? key : key)"
            + (hub.map { ";EntityPath=\($0)" } ?? "")
    }
}

/// A parsed connection string.
public struct ConnectionString: Sendable, Equatable {
    public var endpoint: String
    public var keyName: String
    public var key: String
    /// The hub the connection string is for (`EntityPath`); nil when it names none.
    public var entityPath: String?

    public init(endpoint: String, keyName: String, key: String, entityPath: String? = nil) {
        self.endpoint = endpoint
        self.keyName = keyName
        self.key = key
        self.entityPath = entityPath
    }

    public init(parsing text: String) throws(AuthError) {
        var fields: [String: String] = [:]
        for part in text.split(separator: ";") where !part.trimmingCharacters(in: .whitespaces).isEmpty {
            guard let equals = part.firstIndex(of: "=") else {
                throw AuthError(.unauthorized, "connection string part '\(part)' has no '='")
            }
            fields[part[..<equals].trimmingCharacters(in: .whitespaces).lowercased()] = String(part[part.index(after: equals)...])
        }
        guard let endpoint = fields["endpoint"], let name = fields["sharedaccesskeyname"], let key = fields["sharedaccesskey"]
        else {
            throw AuthError(.unauthorized, "a connection string needs Endpoint, SharedAccessKeyName and SharedAccessKey")
        }
        let entityPath = fields["entitypath"].flatMap { $0.isEmpty ? nil : $0 }
        self.init(endpoint: endpoint, keyName: name, key: key, entityPath: entityPath)
    }

    /// The endpoint as an http(s) URL: `sb://` becomes `https://`.
    public var httpEndpoint: String {
        endpoint.hasPrefix("sb://") ? "https://" + endpoint.dropFirst(5) : endpoint
    }

    /// A token for `resource`, valid for `lifetime` seconds.
    public func token(for resource: String, lifetime: Int = 3600, now: Date = Date()) -> String {
        SharedAccessSignature.sign(
            resource: resource, keyName: keyName, key: key, expiry: Int(now.timeIntervalSince1970) + lifetime)
    }
}
