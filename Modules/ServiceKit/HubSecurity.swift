import Auth
import Bus
import Foundation
import HubProtocol
import Synchronization

/// What a hub service holds to check and make credentials: the namespace's hubs and their
/// shared-access keys (`HubDirectory`), the secret that signs user credentials and tokens, and the
/// rate per key. Loaded once at start from the data folder (made there on the first run); a file
/// that exists but cannot be read is a `ConfigError`, since new keys made in its place would
/// refuse every client holding the real ones.
public final class HubSecurity: Sendable {
    /// The default hub's shared-access keys, from `keys.json`.
    public let keys: KeyStore
    /// Every hub's keys, as the registry's catalog has them.
    public let hubs: HubDirectory
    /// The secret of `user-token.key`.
    public let userTokens: UserTokens
    /// Requests per access key, when `limits.requestsPerSecondPerKey` is set.
    private let keyRate: RateLimiter?
    /// The key the services use between themselves: the namespace's root key, which reaches every hub.
    private let serviceKey: AccessKey?
    private let service: String
    private let namespace: String
    private let perSecond: Int
    /// Each hub's requests and sends a second, by the rate in force for it.
    private let hubRates = HubRates()
    /// Tokens signed here, by key and resource, with when: HTTP workers sign from several threads.
    private let signedTokens = Mutex<[String: (String, TimeInterval)]>([:])

    public static func load(config: HubConfig, service: String) throws(ConfigError) -> HubSecurity {
        let directory = URL(fileURLWithPath: config.dataDir, isDirectory: true)
        let keys: KeyStore
        let namespaceKeys: KeyStore
        do {
            keys = try KeyStore.loadOrCreate(directory: directory)
            namespaceKeys = try KeyStore.loadOrCreateNamespace(directory: directory)
        } catch {
            throw ConfigError("cannot load the hub's keys: \(error)")
        }
        let userTokens: UserTokens
        do {
            userTokens = try UserTokens.loadOrCreate(directory: directory)
        } catch {
            throw ConfigError("cannot load the user-token secret: \(error)")
        }
        return HubSecurity(keys: keys, namespaceKeys: namespaceKeys, userTokens: userTokens, config: config, service: service)
    }

    init(keys: KeyStore, namespaceKeys: KeyStore, userTokens: UserTokens, config: HubConfig, service: String) {
        self.keys = keys
        let limits = config.limits
        hubs = HubDirectory(
            defaultHub: config.hub, fileKeys: keys, namespaceKeys: namespaceKeys,
            defaultLimits: HubLimits(
                requestsPerSecond: limits.requestsPerSecondPerHub, sendsPerSecond: limits.sendsPerSecondPerHub,
                installations: limits.installationsPerHub))
        self.userTokens = userTokens
        self.service = service
        namespace = config.namespace
        perSecond = config.limits.requestsPerSecondPerKey
        keyRate = perSecond > 0 ? RateLimiter(perSecond: perSecond) : nil
        serviceKey = namespaceKeys.key(named: AccessKey.rootManageName) ?? namespaceKeys.keys.first(where: { $0.rights.contains(.manage) })
    }

    /// The scope of a request's hub (nil: the default hub).
    public func scope(_ hub: String?) -> HubScope { hubs.scope(hub) }

    /// The resource a token for `scope`'s hub is signed for: the namespace's URL and the hub.
    public func resource(of scope: HubScope) -> String {
        (namespace.hasSuffix("/") ? namespace : namespace + "/") + scope.name
    }

    /// The bus's security for a service: the hub's key pair from `bus.key` (made on the first run),
    /// a client key derived from the namespace's root key, and the client keys of the default
    /// hub's and the namespace's policies admitted (the catalog's are added as it is read).
    public func bus(directory: URL) throws(ConfigError) -> BusSecurity {
        guard let own = serviceKey else {
            throw ConfigError("\(KeyStore.namespaceFileName) has no key with Manage rights, which the services use between themselves")
        }
        do {
            let server = try BusKeys.loadOrCreate(directory: directory)
            return BusSecurity(
                serverKeys: server, clientKeys: try BusSecurity.clientKeys(keyName: own.name, key: own.key),
                serverPublicKey: server.publicKey, admitted: try BusSecurity.admitted(by: keys.keys + hubs.namespaceKeys.keys))
        } catch {
            throw ConfigError("cannot load the hub's bus key: \(error)")
        }
    }

    /// Checks a request's credential for a right on the hub it names (nil: the default hub), as a
    /// `HubError` the caller gets back; then the key's rate, counted for `peer` when the key has
    /// Listen alone. A key of another hub is refused as unknown (401); a namespace key signs for every hub.
    public func authorize(_ token: String?, hub: String? = nil, needs: AccessRights, peer: Data? = nil) throws(HubError) -> AccessKey {
        let scope = scope(hub)
        let store = try hubs.keys(for: scope)
        let key: AccessKey
        do {
            key = try store.authorize(token, resource: resource(of: scope), needs: needs)
        } catch {
            throw HubError(error.kind == .forbidden ? .forbidden : .unauthorized, error.message)
        }
        try takeRate(of: key, peer: peer)
        // The services' own calls, with the namespace's key, are not a hub's requests.
        if hubs.namespaceKeys.key(named: key.name)?.key != key.key {
            try hubRates.take(scope, perSecond: hubs.limits(scope).requestsPerSecond, what: "requests", setting: "requestsPerSecondPerHub", service: service)
        }
        return key
    }

    /// Takes one send of a hub's rate (`limits.sendsPerSecondPerHub`, or the hub's own).
    public func takeSend(_ scope: HubScope) throws(HubError) {
        try hubRates.take(scope, perSecond: hubs.limits(scope).sendsPerSecond, what: "sends", setting: "sendsPerSecondPerHub", service: service)
    }

    /// Checks a credential of the namespace itself (`namespace-keys.json`), for making and
    /// changing hubs.
    public func authorizeNamespace(_ token: String?, needs: AccessRights) throws(HubError) -> AccessKey {
        do {
            return try hubs.namespaceKeys.authorize(token, resource: namespace, needs: needs)
        } catch {
            throw HubError(
                error.kind == .forbidden ? .forbidden : .unauthorized,
                error.message + " (this needs a key of the namespace, not of a hub: \(AccessKey.rootManageName) in \(KeyStore.namespaceFileName), as nhctl keys prints it)")
        }
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

    /// The user a request's user token names, as its hub's stores key it (`hub/user`; bare for the
    /// default hub), with the hub's scope: a user token is of one hub's user, and a request must
    /// name that hub (`hub`; nil names the default hub). Failures are `HubError`s the caller gets back.
    public func authorizeUser(_ token: String?, hub: String?) throws(HubError) -> (key: String, scope: HubScope) {
        let user: String
        do {
            user = try userTokens.verify(token, kind: .token).user
        } catch {
            throw HubError(.unauthorized, error.message)
        }
        let owner = HubScope.of(key: user)
        guard scope(hub) == owner else {
            throw HubError(.unauthorized, "the user token is of a user of hub '\(owner)', not of hub '\(scope(hub))'")
        }
        guard hubs.has(owner) else { throw HubError(.unauthorized, "the user token's hub '\(owner.name)' is gone") }
        return (user, owner)
    }

    /// A token signed with `key` for `hub` (nil: the default hub): for acting for a client with
    /// exactly its rights. Tokens last an hour; one is reused for ten minutes, so that a busy
    /// caller signs rarely.
    public func token(for key: AccessKey, hub: String? = nil) -> String {
        token(for: key, resource: resource(of: scope(hub)))
    }

    func token(for key: AccessKey, resource: String) -> String {
        let now = Date().timeIntervalSince1970
        let cacheKey = key.name + "\n" + key.key + "\n" + resource
        if let (token, madeAt) = signedTokens.withLock({ $0[cacheKey] }), now - madeAt < 600 { return token }
        let token = ConnectionString(endpoint: namespace, keyName: key.name, key: key.key).token(for: resource)
        signedTokens.withLock { $0[cacheKey] = (token, now) }
        return token
    }

    /// A token of the namespace's root key, for calls between services that share the key files:
    /// it reaches every hub.
    public func serviceToken() -> String? { serviceKey.map { token(for: $0, resource: namespace) } }
}

/// Token buckets for hubs: one table per rate in force, so hubs with limits of their own and
/// those with the configuration's each get theirs.
final class HubRates: Sendable {
    private let limiters = Mutex<[Int: RateLimiter]>([:])

    func take(_ scope: HubScope, perSecond: Int, what: String, setting: String, service: String) throws(HubError) {
        guard perSecond > 0 else { return }
        let limiter = limiters.withLock { limiters in
            if let limiter = limiters[perSecond] { return limiter }
            let made = RateLimiter(perSecond: perSecond)
            limiters[perSecond] = made
            return made
        }
        guard !limiter.allow(scope.prefix) else { return }
        throw HubError(
            .rateLimited,
            "hub '\(scope)' made more than \(perSecond) \(what) a second to \(service) (limits.\(setting), or the hub's own: nhctl hub limits); retry in a second")
    }
}
