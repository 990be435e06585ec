import Foundation
import Synchronization

/// The hub's shared-access keys, kept in `keys.json` in the data folder. On first run the two
/// default keys are generated; several services starting at once agree on one file.
public struct KeyStore: Sendable, Equatable {
    public var keys: [AccessKey]
    /// Tokens whose signature was checked, so that a client reusing its token (as SDKs do, for
    /// up to an hour) costs one HMAC, not one per request.
    private let verified = VerifiedTokens()

    public init(keys: [AccessKey]) { self.keys = keys }

    public static func == (left: KeyStore, right: KeyStore) -> Bool { left.keys == right.keys }

    public static let fileName = "keys.json"

    struct File: Codable { var keys: [AccessKey] }

    /// The namespace's policies, in `namespace-keys.json` beside `keys.json`: made on the first run
    /// with `RootManageSharedAccessKey`, which can make hubs and reach every hub.
    public static let namespaceFileName = "namespace-keys.json"

    /// The two policies a new hub starts with.
    public static func defaultHubKeys() -> [AccessKey] {
        [
            AccessKey.generate(name: AccessKey.defaultListenName, rights: [.listen]),
            AccessKey.generate(name: AccessKey.defaultFullName, rights: .all),
        ]
    }

    /// Reads `keys.json` (the default hub's policies) from `directory`, creating it with fresh
    /// default keys if it is missing.
    public static func loadOrCreate(directory: URL) throws -> KeyStore {
        try loadOrCreate(directory.appendingPathComponent(fileName), fresh: defaultHubKeys)
    }

    /// Reads `namespace-keys.json` from `directory`, creating it with a fresh root key if it is missing.
    public static func loadOrCreateNamespace(directory: URL) throws -> KeyStore {
        try loadOrCreate(directory.appendingPathComponent(namespaceFileName)) {
            [AccessKey.generate(name: AccessKey.rootManageName, rights: .all)]
        }
    }

    static func loadOrCreate(_ url: URL, fresh makeKeys: () -> [AccessKey]) throws -> KeyStore {
        let data = try SecretFile.loadOrCreate(url) {
            let fresh = makeKeys()
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            return try encoder.encode(File(keys: fresh))
        }
        return try decode(data, from: url)
    }

    /// Reads `keys.json` (or another key file) from `directory` without making it; nil when it is not there yet.
    public static func load(directory: URL, fileName: String = fileName) throws -> KeyStore? {
        let url = directory.appendingPathComponent(fileName)
        guard let data = FileManager.default.contents(atPath: url.path) else { return nil }
        return try decode(data, from: url)
    }

    static func decode(_ data: Data, from url: URL) throws -> KeyStore {
        do {
            return KeyStore(keys: try JSONDecoder().decode(File.self, from: data).keys)
        } catch {
            throw AuthError(.unauthorized, "\(url.path) is not a valid key file: \(error)")
        }
    }

    public func key(named name: String) -> AccessKey? { keys.first { $0.name == name } }

    /// Checks a token for a resource and a right. Returns the key that signed it.
    public func authorize(_ token: String?, resource: String, needs: AccessRights, now: Date = Date()) throws(AuthError)
        -> AccessKey
    {
        guard let token, !token.isEmpty else {
            throw AuthError(.unauthorized, "no credential; sign a SharedAccessSignature token with a key of this hub")
        }
        let signature: SharedAccessSignature
        let key: AccessKey
        if let (known, secret) = verified.lookup(token), let current = self.key(named: known.keyName),
            current.key == secret || current.secondaryKey == secret
        {
            signature = known
            key = current
        } else {
            signature = try SharedAccessSignature(parsing: token)
            guard let named = self.key(named: signature.keyName) else {
                throw AuthError(.unauthorized, "unknown key name '\(signature.keyName)'")
            }
            guard let secret = named.signingKeys.first(where: { signature.isSigned(with: $0) }) else {
                throw AuthError(.unauthorized, "the signature does not match key '\(named.name)'")
            }
            key = named
            verified.remember(token, signature, secret: secret)
        }
        guard Double(signature.expiry) > now.timeIntervalSince1970 else {
            throw AuthError(.unauthorized, "the token expired at \(Date(timeIntervalSince1970: Double(signature.expiry)))")
        }
        guard verified.covers(signature, resource) else {
            throw AuthError(.unauthorized, "the token is for '\(signature.resource)', not '\(resource)'")
        }
        guard key.rights.allows(needs) else {
            throw AuthError(.forbidden, "key '\(key.name)' has \(key.rights) rights; this needs \(needs)")
        }
        return key
    }
}

/// Tokens already checked, with the key secret that signed each; bounded, emptied when full.
final class VerifiedTokens: Sendable {
    private let entries = Mutex<[String: (SharedAccessSignature, String)]>([:])
    static let capacity = 4_096

    /// Whether a token's resource covers a requested one, by resource pair: the pairs are few (a
    /// service checks every request against its own hub), and `SharedAccessSignature.covers`
    /// decodes and lowercases both each time.
    private let coverage = Mutex<[String: Bool]>([:])

    func lookup(_ token: String) -> (SharedAccessSignature, String)? { entries.withLock { $0[token] } }

    func covers(_ signature: SharedAccessSignature, _ requested: String) -> Bool {
        let pair = signature.resource + "\n" + requested
        if let known = coverage.withLock({ $0[pair] }) { return known }
        let covers = signature.covers(requested)
        coverage.withLock { coverage in
            if coverage.count >= Self.capacity { coverage.removeAll(keepingCapacity: true) }
            coverage[pair] = covers
        }
        return covers
    }

    func remember(_ token: String, _ signature: SharedAccessSignature, secret: String) {
        entries.withLock { entries in
            if entries.count >= Self.capacity {
                // Expired tokens go first; only a cache full of live ones starts over.
                let now = Int(Date().timeIntervalSince1970)
                entries = entries.filter { $0.value.0.expiry > now }
                if entries.count >= Self.capacity { entries.removeAll(keepingCapacity: true) }
            }
            entries[token] = (signature, secret)
        }
    }
}
