import Auth
import Bus
import Foundation
import HubProtocol
import Synchronization

/// What a hub service holds to check and make credentials: the shared-access keys, the secret that
/// signs user credentials and tokens, and the rate per key. Loaded once at start from the data
/// folder (made there on the first run); a file that exists but cannot be read is a `ConfigError`,
/// since new keys made in its place would refuse every client holding the real ones.
public final class HubSecurity: Sendable {
    /// The hub's shared-access keys, from `keys.json`.
    public let keys: KeyStore
    /// The secret of `user-token.key`.
    public let userTokens: UserTokens
    /// Requests per access key, when `limits.requestsPerSecondPerKey` is set.
    private let keyRate: RateLimiter?
    /// The key the services use between themselves: the full key, or else the first with Manage.
    private let manageKey: AccessKey?
    private let service: String
    private let namespace: String
    private let hubResource: String
    private let perSecond: Int
    /// Tokens signed here, by key, with when: HTTP workers sign from several threads.
    private let signedTokens = Mutex<[String: (String, TimeInterval)]>([:])

    public static func load(config: HubConfig, service: String) throws(ConfigError) -> HubSecurity {
        let directory = URL(fileURLWithPath: config.dataDir, isDirectory: true)
        let keys: KeyStore
        do {
            keys = try KeyStore.loadOrCreate(directory: directory)
        } catch {
            throw ConfigError("cannot load the hub's keys: \(error)")
        }
        let userTokens: UserTokens
        do {
            userTokens = try UserTokens.loadOrCreate(directory: directory)
        } catch {
            throw ConfigError("cannot load the user-token secret: \(error)")
        }
        return HubSecurity(keys: keys, userTokens: userTokens, config: config, service: service)
    }

    init(keys: KeyStore, userTokens: UserTokens, config: HubConfig, service: String) {
        self.keys = keys
        self.userTokens = userTokens
        self.service = service
        namespace = config.namespace
        hubResource = config.hubResource
        perSecond = config.limits.requestsPerSecondPerKey
        keyRate = perSecond > 0 ? RateLimiter(perSecond: perSecond) : nil
        manageKey = keys.key(named: AccessKey.defaultFullName) ?? keys.keys.first(where: { $0.rights.contains(.manage) })
    }

    /// The bus's security for a service: the hub's key pair from `bus.key` (made on the first run),
    /// a client key derived from the first Manage key, and every access key's client key admitted.
    public func bus(directory: URL) throws(ConfigError) -> BusSecurity {
        guard let own = manageKey else {
            throw ConfigError("\(KeyStore.fileName) has no key with Manage rights, which the services use between themselves")
        }
        do {
            let server = try BusKeys.loadOrCreate(directory: directory)
            return BusSecurity(
                serverKeys: server, clientKeys: try BusSecurity.clientKeys(keyName: own.name, key: own.key),
                serverPublicKey: server.publicKey, admitted: try BusSecurity.admitted(by: keys))
        } catch {
            throw ConfigError("cannot load the hub's bus key: \(error)")
        }
    }

    /// Checks a request's credential for a right, as a `HubError` the caller gets back; then the
    /// key's rate, counted for `peer` when the key has Listen alone.
    public func authorize(_ token: String?, needs: AccessRights, peer: Data? = nil) throws(HubError) -> AccessKey {
        let key: AccessKey
        do {
            key = try keys.authorize(token, resource: hubResource, needs: needs)
        } catch {
            throw HubError(error.kind == .forbidden ? .forbidden : .unauthorized, error.message)
        }
        try takeRate(of: key, peer: peer)
        return key
    }

    /// Takes one request of `key`'s rate (`limits.requestsPerSecondPerKey`), throwing
    /// `rate_limited` when it has none left. Manage keys, which the services use between
    /// themselves, are not limited. A key with Listen alone is the one every device holds, so its
    /// rate is counted per connection.
    public func takeRate(of key: AccessKey, peer: Data? = nil) throws(HubError) {
        guard let keyRate, !key.rights.contains(.manage) else { return }
        let bucket = key.rights == .listen ? "\(key.name)/\((peer ?? Data()).base64EncodedString())" : key.name
        guard !keyRate.allow(bucket) else { return }
        throw HubError(
            .rateLimited,
            "key '\(key.name)' sent more than \(perSecond) requests a second to \(service) (limits.requestsPerSecondPerKey); retry in a second")
    }

    /// The user a request's user token names, as a `HubError` the caller gets back when it does not check out.
    public func authorizeUser(_ token: String?) throws(HubError) -> String {
        do {
            return try userTokens.verify(token, kind: .token).user
        } catch {
            throw HubError(.unauthorized, error.message)
        }
    }

    /// A token signed with `key` for this hub: for acting for a client with exactly its rights.
    /// Tokens last an hour; one is reused for ten minutes, so that a busy caller signs rarely.
    public func token(for key: AccessKey) -> String {
        let now = Date().timeIntervalSince1970
        let cacheKey = key.name + "\n" + key.key
        if let (token, madeAt) = signedTokens.withLock({ $0[cacheKey] }), now - madeAt < 600 { return token }
        let token = ConnectionString(endpoint: namespace, keyName: key.name, key: key.key).token(for: hubResource)
        signedTokens.withLock { $0[cacheKey] = (token, now) }
        return token
    }

    /// A token with every right, for calls between services that share the key file.
    public func serviceToken() -> String? { manageKey.map(token(for:)) }
}
