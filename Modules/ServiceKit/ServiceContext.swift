import Auth
import Bus
import CBuildInfo
import Foundation
import HubProtocol
import Storage

/// What a service gets when it starts: its runtime (config, logger, loop, data folder, shutdown),
/// an opener for its store, a factory for its bus sockets, and its security once loaded.
public final class ServiceContext {
    public let runtime: ServiceRuntime
    public let stores: StoreOpener
    public let bus: BusFactory

    public var name: String { runtime.name }
    public var config: HubConfig { runtime.config }
    public var logger: Logger { runtime.logger }
    public var loop: EventLoop { runtime.loop }
    public var dataDirectory: URL { runtime.dataDirectory }

    init(runtime: ServiceRuntime) {
        self.runtime = runtime
        stores = StoreOpener(runtime: runtime)
        bus = BusFactory(runtime: runtime)
        bus.credential = { [unowned self] in self.serviceToken() }
        bus.catalogVersion = { [unowned self] in self.security?.hubs.version }
    }

    /// A context for running a service's handlers in process (tests, tools): the keys and the
    /// user-token secret loaded from the config's data folder (made there when missing), no
    /// signal handling, and plain sockets until something secures the bus.
    public static func detached(name: String, config: HubConfig, logLevel: Logger.Level = .warning) throws -> ServiceContext {
        var logger = Logger(service: name)
        logger.level = logLevel
        let loop = EventLoop(signals: SignalWatcher(signals: []), logger: logger)
        let context = ServiceContext(runtime: ServiceRuntime(
            name: name, config: config, logger: logger, loop: loop, dataDirectory: URL(fileURLWithPath: config.dataDir, isDirectory: true)))
        context.security = try HubSecurity.load(config: config, service: name)
        return context
    }

    /// The keys, the user-token secret and the rate per key, as `prepareKeys` or `detached` loaded
    /// them at start; nil before.
    public private(set) var security: HubSecurity?

    private var loaded: HubSecurity {
        guard let security else { preconditionFailure("\(name): prepareKeys() or detached(...) loads the keys before they are read") }
        return security
    }

    /// The hub's shared-access keys (see `HubSecurity`).
    public var keys: KeyStore { loaded.keys }
    /// The secret that signs user credentials and tokens (see `HubSecurity`).
    public var userTokens: UserTokens { loaded.userTokens }

    /// Loads the keys, the user-token secret and the bus key at start, making them on first run,
    /// so that the files exist as soon as the service is up and one that cannot be read stops it
    /// with a `ConfigError` (exit 2); then secures the bus (see `BusSecurity`): every socket this
    /// context's bus factory makes from here on is CURVE, and those it binds admit only holders of the hub's
    /// access keys.
    public func prepareKeys() throws {
        let security = try HubSecurity.load(config: config, service: name)
        self.security = security
        try bus.secure(try security.bus(directory: URL(fileURLWithPath: config.dataDir, isDirectory: true)))
    }

    /// Checks a request's credential for a right on the hub it names (nil: the default hub), and
    /// the key's rate, counted for the connection the request came on (see `HubSecurity.authorize`).
    @discardableResult
    public func authorize(_ token: String?, hub: String? = nil, needs: AccessRights) throws(HubError) -> AccessKey {
        try loaded.authorize(token, hub: hub, needs: needs, peer: bus.currentPeer)
    }

    /// Checks a request's credential for a right on the hub its envelope names, and returns the
    /// hub's scope, which keys what the request reads and writes.
    @discardableResult
    public func authorize<R: HubMessage>(_ request: Envelope<R>, needs: AccessRights) throws(HubError) -> HubScope {
        try loaded.authorize(request.auth, hub: request.hub, needs: needs, peer: bus.currentPeer)
        return loaded.scope(request.hub)
    }

    /// Takes one send of a hub's rate (see `HubSecurity.takeSend`).
    public func takeSend(_ scope: HubScope) throws(HubError) { try loaded.takeSend(scope) }

    /// Checks a credential of the namespace itself, for making and changing hubs.
    @discardableResult
    public func authorizeNamespace(_ token: String?, needs: AccessRights) throws(HubError) -> AccessKey {
        try loaded.authorizeNamespace(token, needs: needs)
    }

    /// The namespace's hubs and their keys (see `HubDirectory`).
    public var hubs: HubDirectory { loaded.hubs }

    /// The address tokens for `scope`'s hub are signed for: the namespace's and the hub's name.
    public func resource(of scope: HubScope) -> String { loaded.resource(of: scope) }

    /// The scope of a hub a request names (nil: the default hub).
    public func scope(_ hub: String?) -> HubScope { loaded.scope(hub) }

    /// Takes one request of `key`'s rate (see `HubSecurity.takeRate`).
    public func takeRate(of key: AccessKey, peer: Data? = nil) throws(HubError) { try loaded.takeRate(of: key, peer: peer) }

    /// The user a request's user token names, as its hub's stores key it, and the hub's scope (see
    /// `HubSecurity.authorizeUser`).
    public func authorizeUser(_ token: String?, hub: String?) throws(HubError) -> (key: String, scope: HubScope) {
        try loaded.authorizeUser(token, hub: hub)
    }

    /// The user a user token names, as `scope`'s clients know it; a token of another hub's user is refused.
    public func authorizeUser(_ token: String?, in scope: HubScope) throws(HubError) -> String {
        let (key, owner) = try loaded.authorizeUser(token, hub: scope.envelopeHub)
        guard owner == scope else { throw HubError(.unauthorized, "the user token is of a user of hub '\(owner.name)'") }
        return scope.id(key)
    }

    /// A token signed with `key` for `hub` (see `HubSecurity.token`).
    public func token(for key: AccessKey, hub: String? = nil) -> String { loaded.token(for: key, hub: hub) }

    /// A token with every right, for calls between services that share the key file; nil where
    /// there are no keys (the agent).
    public func serviceToken() -> String? { security?.serviceToken() }

    public func health(_ endpoints: [String: String], status: String = "ok", details: [String: String]? = nil) -> HealthReply {
        runtime.health(endpoints, status: status, details: details)
    }

    public func onShutdown(_ closer: @escaping () -> Void) { runtime.onShutdown(closer) }

    func shutdown() { runtime.shutdown() }
}

/// The release this build belongs to. The packages carry the same version.
public enum HubVersion {
    public static let current = "0.1.0"
    /// The git commit the build was made from, as `make` stamps it (nil for a build made otherwise).
    public static let commit: String? = {
        let text = String(cString: nh_build_commit())
        return text.isEmpty ? nil : text
    }()
    /// What `--version` prints after the executable's name: `0.1.0 (commit 1a2b3c4d5e6f)`.
    public static var description: String { commit.map { "\(current) (commit \($0))" } ?? current }
}
