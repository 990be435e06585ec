import Auth
import Bus
import CBuildInfo
import Foundation
import HubProtocol
import Storage

/// What a service gets when it starts: its config, logger, loop and data folder.
public final class ServiceContext {
    public let name: String
    public let config: HubConfig
    public let logger: Logger
    public let loop: EventLoop
    public let dataDirectory: URL
    public let startedAt = ContinuousClock.now
    /// Run at shutdown, last added first.
    private var closers: [() -> Void] = []

    init(name: String, config: HubConfig, logger: Logger, loop: EventLoop, dataDirectory: URL) {
        self.name = name
        self.config = config
        self.logger = logger
        self.loop = loop
        self.dataDirectory = dataDirectory
    }

    /// A context for running a service's handlers in process (tests, tools): the keys and the
    /// user-token secret loaded from the config's data folder (made there when missing), no
    /// signal handling, and plain sockets until something secures the bus.
    public static func detached(name: String, config: HubConfig, logLevel: Logger.Level = .warning) throws -> ServiceContext {
        var logger = Logger(service: name)
        logger.level = logLevel
        let loop = EventLoop(signals: SignalWatcher(signals: []), logger: logger)
        let context = ServiceContext(
            name: name, config: config, logger: logger, loop: loop, dataDirectory: URL(fileURLWithPath: config.dataDir, isDirectory: true))
        context.security = try HubSecurity.load(config: config, service: name)
        return context
    }

    /// Opens (creating if needed) this service's database in the data folder and migrates it.
    /// `synchronous` is FULL for what must survive power loss once acknowledged to a sender;
    /// NORMAL for state that can be rebuilt from another service's store, which WAL keeps intact.
    public func openStore(_ fileName: String, migrations: [Migration], synchronous: String = "FULL") throws -> SQLiteDatabase {
        let path = dataDirectory.appendingPathComponent(fileName).path
        let database = try SQLiteDatabase(
            path: path, options: SQLiteDatabase.Options(synchronous: synchronous, maxBytes: config.limits.storeBytes))
        try database.migrate(migrations)
        onShutdown { database.close() }
        logger.info("store open", ("path", path), ("schema", try database.schemaVersion))
        return database
    }

    /// This service's store on the engine `store` names: `postgres` with the URL when it names a
    /// PostgreSQL server (a failure there is a config error), else `sqlite`.
    public func chooseStore<Store>(schema: String, postgres: (String) throws -> Store, sqlite: () throws -> Store) throws -> Store {
        guard config.storeIsPostgres, let url = config.store else { return try sqlite() }
        let store: Store
        do {
            store = try postgres(url)
        } catch {
            throw ConfigError("store: cannot use the PostgreSQL store: \(error)")
        }
        logger.info("store open", ("engine", "postgresql"), ("schema", schema))
        return store
    }

    /// Binds a request socket that answers health, and serves it from the loop.
    /// With `group`, the requests waiting at once share one commit (see `CommitGroup`).
    public func bindRequests(
        _ endpoint: String, role: String = "requests", group: CommitGroup? = nil, maxMessageBytes: Int? = nil, ownerOnly: Bool = false,
        endpoints: @escaping () -> [String: String], details: @escaping () -> [String: String]? = { nil }
    ) throws -> HubServer {
        let server = try HubServer(
            bind: endpoint, logger: logger, maxMessageBytes: maxMessageBytes ?? config.maxMessageBytes, curve: bus?.serverKeys,
            ownerOnly: ownerOnly)
        servers.append(server)
        group?.onEffectError = { [logger] error in
            logger.error("a step after a commit failed; what was committed stands", ("error", "\(error)"))
        }
        server.on(HealthRequest.self) { [unowned self] _ in self.health(endpoints(), details: details()) }
        server.on(MetricsRequest.self) { [unowned self, unowned server] _ in
            var samples = server.samples
            // Numeric details, such as queue depths and counts, become gauges.
            for (name, value) in details() ?? [:] {
                if let number = Double(value) { samples["nh_\(Self.snakeCase(name))"] = number }
            }
            samples["nh_uptime_seconds"] = self.health([:]).uptimeSeconds
            return MetricsReply(service: self.name, samples: samples)
        }
        if let group {
            loop.watch(server.socket) { try server.serve(group: group) }
        } else {
            loop.watch(server.socket) { try server.serve() }
        }
        onShutdown { server.close() }
        logger.info("listening", ("role", role), ("endpoint", server.endpoint))
        return server
    }

    /// Binds a change-stream publisher that sends a heartbeat every `heartbeatMs`.
    public func bindEvents(_ endpoint: String, startingAfter sequence: UInt64) throws -> SequencedPublisher {
        let publisher = try SequencedPublisher(bind: [endpoint], startingAfter: sequence, curve: bus?.serverKeys)
        loop.every(milliseconds: config.heartbeatMs) { try publisher.heartbeat() }
        onShutdown { publisher.close() }
        logger.info("publishing", ("role", "events"), ("endpoint", publisher.endpoints.first ?? endpoint))
        return publisher
    }

    /// Follows another service's change stream whose messages are hints (readers fetch what
    /// changed themselves), on this service's loop: `apply` gets each message in order, and `gap`
    /// the sequence reached when messages were missed, so that every reader fetches again. The
    /// stream is joined where it stands, without a snapshot.
    public func followHints(_ endpoint: String, apply: @escaping (SequencedMessage) throws -> Void, gap: @escaping (UInt64) throws -> Void)
        throws
    {
        let socket = try subscriber(endpoint)
        var tracker = SequenceTracker()
        loop.watch(socket) {
            while let frames = try socket.receive(wait: false) {
                guard let message = try? SequencedMessage(frames: frames) else { continue }
                if tracker.position == nil { tracker.reset(to: message.isHeartbeat ? message.sequence : message.sequence - 1) }
                switch tracker.observe(message.sequence, heartbeat: message.isHeartbeat) {
                case .skip: continue
                case .resync:
                    tracker.reset(to: message.sequence)
                    try gap(message.sequence)
                case .apply:
                    try apply(message)
                }
            }
        }
    }

    /// Follows a stream whose messages only say that there is more (the publish service's): each
    /// time messages arrive, `more` gets the highest sequence among them. Messages in another shape
    /// are passed over.
    public func followLatest(_ endpoint: String, more: @escaping (UInt64) throws -> Void) throws {
        let socket = try subscriber(endpoint)
        loop.watch(socket) {
            var latest: UInt64 = 0
            while let frames = try socket.receive(wait: false) {
                guard let message = try? SequencedMessage(frames: frames) else { continue }
                latest = max(latest, message.sequence)
            }
            try more(latest)
        }
    }

    /// A SUB socket on another service's stream, secured as the bus is, closed at shutdown.
    private func subscriber(_ endpoint: String) throws -> ZMQSocket {
        let socket = try ZMQContext.shared.socket(.sub)
        try socket.setLinger(0)
        if let bus { try socket.makeCurveClient(bus.clientKeys, serverPublicKey: bus.serverPublicKey) }
        try socket.subscribe()
        try socket.connect(endpoint)
        onShutdown { socket.close() }
        return socket
    }

    /// A client of another service that sends its requests without waiting for their replies,
    /// signed with the service token; its socket is for the caller's loop to watch.
    public func forwarder(_ endpoint: String) throws -> HubForwarder {
        let forwarder = try HubForwarder(connect: endpoint, timeoutMs: config.requestTimeoutMs, curve: bus?.client) { [unowned self] in
            self.serviceToken()
        }
        onShutdown { forwarder.close() }
        return forwarder
    }

    /// A client of another service, with the configured timeout and attempts.
    public func client(_ endpoint: String, policy: RetryPolicy? = nil) throws -> HubClient {
        let client = try HubClient(
            connect: endpoint,
            policy: policy ?? RetryPolicy(timeout: config.requestTimeoutMs, attempts: config.requestAttempts), curve: bus?.client,
            auth: { [unowned self] in self.serviceToken() })
        client.maxMessageBytes = config.publishRequestBytes
        onShutdown { client.close() }
        return client
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
    /// context makes from here on is CURVE, and those it binds admit only holders of the hub's
    /// access keys.
    public func prepareKeys() throws {
        let security = try HubSecurity.load(config: config, service: name)
        self.security = security
        try secureBus(try security.bus(directory: URL(fileURLWithPath: config.dataDir, isDirectory: true)))
    }

    /// How this context's sockets are secured, set by `secureBus`; nil (plain sockets) until then.
    /// Every socket the context makes takes it from here.
    public private(set) var bus: BusSecurity?
    /// What the ZAP handler's thread reads.
    private let admission = BusAdmission()

    /// Makes `security` this context's and starts the ZAP handler that enforces it. Call before
    /// binding any socket.
    public func secureBus(_ security: BusSecurity) throws {
        bus = security
        admission.set(security)
        guard zap == nil else { return }
        let handler = try ZAPHandler { [admission] domain, key in admission.admits(domain: domain, key: key) }
        zap = handler
        onShutdown { handler.close() }
    }

    /// Counts of handshakes the ZAP handler accepted and refused.
    public var handshakes: (accepted: Int, refused: Int) { zap?.counts ?? (0, 0) }
    private var zap: ZAPHandler?

    /// Checks a request's credential for a right, and the key's rate, counted for the connection
    /// the request came on (see `HubSecurity.authorize`).
    @discardableResult
    public func authorize(_ token: String?, needs: AccessRights) throws(HubError) -> AccessKey {
        try loaded.authorize(token, needs: needs, peer: servers.lazy.compactMap(\.currentPeer).first)
    }

    /// The request servers bound through `bindRequests`; the one handling a request knows its peer.
    private var servers: [HubServer] = []

    /// Takes one request of `key`'s rate (see `HubSecurity.takeRate`).
    public func takeRate(of key: AccessKey, peer: Data? = nil) throws(HubError) { try loaded.takeRate(of: key, peer: peer) }

    /// The user a request's user token names, as a `HubError` the caller gets back when it does not check out.
    public func authorizeUser(_ token: String?) throws(HubError) -> String { try loaded.authorizeUser(token) }

    /// A token signed with `key` for this hub (see `HubSecurity.token`).
    public func token(for key: AccessKey) -> String { loaded.token(for: key) }

    /// A token with every right, for calls between services that share the key file; nil where
    /// there are no keys (the agent).
    public func serviceToken() -> String? { security?.serviceToken() }

    public func health(_ endpoints: [String: String], status: String = "ok", details: [String: String]? = nil) -> HealthReply {
        let uptime = startedAt.duration(to: .now)
        return HealthReply(
            service: name, status: status, version: HubVersion.current, pid: getpid(),
            uptimeSeconds: Double(uptime.components.seconds) + Double(uptime.components.attoseconds) / 1e18,
            endpoints: endpoints, details: details)
    }

    static func snakeCase(_ name: String) -> String {
        var result = ""
        for character in name {
            if character.isUppercase { result += "_" + character.lowercased() } else { result.append(character) }
        }
        return result
    }

    public func onShutdown(_ closer: @escaping () -> Void) {
        closers.append(closer)
    }

    func shutdown() {
        for closer in closers.reversed() { closer() }
        closers.removeAll()
    }
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
