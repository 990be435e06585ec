import Foundation

/// A named shared-access key and its rights.
public struct AccessKey: Codable, Sendable, Equatable {
    public var name: String
    public var key: String
    public var rights: AccessRights

    public init(name: String, key: String, rights: AccessRights) {
        self.name = name
        self.key = key
        self.rights = rights
    }

    public static let defaultListenName = "DefaultListenSharedAccessSignature"
    public static let defaultFullName = "DefaultFullSharedAccessSignature"

    /// A new key: 32 random bytes in base64, as the service generates them.
    public static func generate(name: String, rights: AccessRights) -> AccessKey {
        AccessKey(name: name, key: Crypto.randomBytes(32).base64EncodedString(), rights: rights)
    }

    /// `Endpoint=<endpoint>;SharedAccessKeyName=<name>;SharedAccessKey=<key>`.
    public func connectionString(endpoint: String) -> String {
        "Endpoint=\(endpoint);SharedAccessKeyName=\(name);SharedAccessKey=\(key)"
    }
}

/// A parsed connection string.
public struct ConnectionString: Sendable, Equatable {
    public var endpoint: String
    public var keyName: String
    public var key: String

    public init(endpoint: String, keyName: String, key: String) {
        self.endpoint = endpoint
        self.keyName = keyName
        self.key = key
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
        self.init(endpoint: endpoint, keyName: name, key: key)
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
