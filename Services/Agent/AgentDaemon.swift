import Auth
import Bus
import DispatchCore
import Foundation
import HubProtocol
import ServiceKit

/// The agent at work: it registers its installation with the chosen categories, keeps a channel
/// to the dispatcher (hello as heartbeat, reconnect with backoff), shows each delivery once,
/// and acknowledges it.
final class AgentDaemon {
    let context: ServiceContext
    let store: AgentStore
    let identity: AgentIdentity
    let output: AgentOutput
    let installationId: String
    /// The installation as the dispatchers know it among every hub's: its hub's key (`HubScope`).
    let channelId: String
    let template: String
    let userSync: AgentUserSync?
    let rich: RichFetcher
    let desktop: DesktopNotifications
    let distributor: UnifiedPushDistributor
    private let bus: SessionBus
    private let registry: HubClient
    private let channel: ZMQSocket
    private let monitor: SocketMonitor
    /// The dispatchers this agent may connect to, and the one it is connected to now.
    private let dispatchers: [String]
    private var connectedTo: String
    private var core: AgentCore
    private let keys: CurveKeyPair
    private(set) var registered = false
    /// The registry version of the last registration, said with each hello (`AgentHello.registered`).
    private var registeredVersion: UInt64?
    private var lastRegistrationError = ""

    init(context: ServiceContext, store: AgentStore, identity: AgentIdentity, environment: [String: String]) throws {
        self.context = context
        self.store = store
        self.identity = identity
        installationId = try environment["NH_AGENT_INSTALLATION_ID"] ?? store.installationId()
        channelId = identity.scope.key(installationId)
        template = environment["NH_AGENT_TEMPLATE"] ?? #"{"title":"$(title)","message":"$(messageParam)"}"#
        output = AgentOutput(hook: environment["NH_AGENT_HOOK"], logger: context.logger)
        bus = SessionBus(environment: environment, logger: context.logger, loop: context.loop)
        desktop = DesktopNotifications(environment: environment, bus: bus, logger: context.logger)
        output.desktop = desktop
        distributor = UnifiedPushDistributor(
            environment: environment, bus: bus, store: AppStore(database: store.database),
            endpointBase: Self.endpointBase(namespace: context.config.namespace), logger: context.logger)
        // Every socket of the agent is CURVE: to the services with a key derived from its listen
        // key, and its own control socket with its device key, admitting the same listen key.
        keys = try store.channelKeys()
        let serverKey = try BusKeys.serverPublicKey(config: context.config, environment: environment, wait: 30)
        let listen = try identity.waitForCredential(seconds: 30)
        try context.bus.secure(try AgentDaemon.security(listen: listen, device: keys, serverKey: serverKey, config: context.config))
        try BusKeys.writeDeviceKey(keys.publicKey, agentHome: context.dataDirectory)
        if let credential = try environment["NH_AGENT_USER_CREDENTIAL"] ?? store.setting("userCredential") {
            let cache = UserCache(database: store.database)
            let sync = try context.bus.client(context.config.sync.requests, policy: RetryPolicy(timeout: 2_000, attempts: 1))
            sync.hub = { [identity] in identity.envelopeHub }
            userSync = AgentUserSync(
                cache: cache, credential: credential, device: installationId, logger: context.logger, output: output, client: sync)
            userSync?.desktop = desktop
            userSync?.keys = AgentKeys(store: store, device: installationId)
        } else {
            userSync = nil
        }
        registry = try context.bus.client(context.config.registry.requests, policy: RetryPolicy(timeout: 1_000, attempts: 1))
        registry.auth = { [identity] in identity.token() }
        registry.hub = { [identity] in identity.envelopeHub }

        let publish = try context.bus.client(context.config.publish.requests, policy: RetryPolicy(timeout: 2_000, attempts: 1))
        publish.auth = { [identity] in identity.token() }
        publish.hub = { [identity] in identity.envelopeHub }
        rich = try RichFetcher(
            store: store, home: context.dataDirectory, client: publish, output: output, logger: context.logger,
            maxAttempts: Int(environment["NH_AGENT_RICH_ATTEMPTS"] ?? "") ?? 8)
        if let userSync, let keys = userSync.keys {
            rich.open = { record, keyId in try keys.open(record, keyId: keyId) { try userSync.call(UserKeyRequest(device: userSync.device)) } }
        }
        let heartbeatMs = context.config.agentHeartbeatMs
        let leaseMs = context.config.leasePeriodMs
        dispatchers = HubConfig.dispatcherEndpoints(context.config.dispatch.agents)
        core = AgentCore(
            settings: AgentCore.Settings(
                heartbeat: Double(heartbeatMs) / 1000, helloRetry: min(0.5, Double(heartbeatMs) / 1000), leasePeriod: Double(leaseMs) / 1000),
            dispatchers: dispatchers)
        // With several dispatchers, the transport's heartbeats go every lease period and a
        // dispatcher that does not answer one within a lease period is left; with one, there is
        // nowhere else to go, and they go every agent heartbeat.
        let transport = context.config.agentTransportHeartbeat(dispatchers: dispatchers.count)
        // The channel has a context of its own, ended as the agent stops, so that its goodbye goes
        // out before the process exits.
        let channelContext = ZMQContext()
        channel = try ZMQSocket.agentChannel(
            connect: dispatchers[0], keys: keys, serverKey: serverKey, heartbeatMs: transport.intervalMs, timeoutMs: transport.timeoutMs,
            context: channelContext)
        connectedTo = dispatchers[0]
        monitor = try SocketMonitor(
            watching: channel, events: [.handshakeSucceeded, .disconnected, .connectRetried], context: channelContext)
        context.onShutdown { [weak self, channel, monitor, channelId] in
            monitor.close()
            // A goodbye ends the session at once; without one the dispatcher waits out three
            // heartbeats of silence. Ending the context waits for it to go out, half a second at most.
            // Sent whenever there is a connection, welcome read or not: one with no session yet is
            // refused, which costs nothing.
            if self?.core.connected == true {
                // Best effort at shutdown: without it the dispatcher ends the session after three silent heartbeats.
                _ = try? channel.send(AgentWire.encode(.bye(AgentBye(installationId: channelId))), wait: false)
                // Likewise: without it the goodbye may not go out.
                try? channel.setLinger(500)
            }
            channel.close()
            channelContext.terminate()
        }
        if identity.credential == nil {
            context.logger.warning("no listen key yet: waiting for the hub key file, or set NH_AGENT_CONNECTION_STRING")
        }
    }

    /// The agent's bus security: client keys from its listen key; its control socket served with
    /// its device key, admitting that listen key and, on a host of the services, the hub's keys.
    static func security(listen: ConnectionString, device: CurveKeyPair, serverKey: String, config: HubConfig) throws -> BusSecurity {
        let clientKeys = try BusSecurity.clientKeys(for: listen)
        var admitted: Set<String> = [clientKeys.publicKey]
        // Absent on a host without the services: only the listen key is admitted.
        let directory = URL(fileURLWithPath: config.dataDir, isDirectory: true)
        for file in [KeyStore.fileName, KeyStore.namespaceFileName] {
            if let keys = try? KeyStore.load(directory: directory, fileName: file) {
                admitted.formUnion(try BusSecurity.admitted(by: keys.keys))
            }
        }
        return BusSecurity(serverKeys: device, clientKeys: clientKeys, serverPublicKey: serverKey, admitted: admitted)
    }

    /// Apps' push endpoints start with the gateway's address and `up/`; the app's own secret
    /// follows, and nothing else, so that two apps' endpoints on one device share nothing that links
    /// them (the registry finds the installation by the secret's hash).
    static func endpointBase(namespace: String) -> String {
        (namespace.hasSuffix("/") ? namespace : namespace + "/") + "up/"
    }

    /// Where this installation is served: its shard, and the dispatcher the channel is connected to.
    var placement: [String: String] {
        ["shard": String(Shards.of(channelId)), "dispatcher": connectedTo, "dispatcherWelcomed": String(core.welcomed)]
    }

    /// The user this agent signs in as: the one its credential names, once a token confirmed it.
    var userId: String? { userSync?.userId }

    func start() throws {
        if let userSync { wire(desktop, to: userSync) }
        distributor.registerEndpoints = { [unowned self] in try self.registerNow() }
        distributor.acknowledge = { [unowned self] ids, failures in
            do {
                try self.acknowledge(ids, failures: failures)
            } catch {
                self.context.logger.warning("could not acknowledge push messages; they come again", ("error", "\(error)"))
            }
        }
        bus.start()
        context.loop.every(milliseconds: 1_000) { [unowned self] in try self.distributor.tick(now: Date()) }
        if let userSync {
            _ = userSync.accessToken()
            userSync.syncNow()
            context.loop.every(milliseconds: 30_000) { userSync.syncNow() }
        }
        register()
        context.loop.watch(channel) { [unowned self] in try self.receive() }
        context.loop.watch(monitor.socket) { [unowned self] in
            for (event, endpoint) in try self.monitor.drainWithEndpoints() {
                // What happens on a connection the agent has left is no news about the current one.
                if endpoint != self.connectedTo && self.dispatchers.contains(endpoint) { continue }
                if event == .handshakeSucceeded { try self.perform(self.core.on(.connected, now: Date())) }
                if event == .disconnected { try self.perform(self.core.on(.disconnected, now: Date())) }
                if event == .connectRetried { try self.perform(self.core.on(.refused, now: Date())) }
            }
        }
        context.loop.every(milliseconds: 100) { [unowned self] in try self.perform(self.core.on(.tick, now: Date())) }
        // Its timers wake the loop every 0.1 s, so a longer gap is a pause (the host slept, or the
        // process was stopped) or a handler that took that long: the dispatcher may have ended
        // the session meanwhile, and a hello too many costs nothing.
        context.loop.onStall(after: .seconds(3)) { [unowned self] _ in try self.perform(self.core.on(.resumed, now: Date())) }
        context.loop.every(milliseconds: context.config.heartbeatMs) { [unowned self] in
            if !self.registered { self.register() }
            self.output.reap()
        }
        context.loop.every(milliseconds: 200) { [unowned self] in
            let (shown, failed) = try self.rich.processDue(now: Date())
            if !shown.isEmpty || !failed.isEmpty { try self.acknowledge(shown, failures: failed) }
        }
        context.loop.every(milliseconds: 1_000) { [unowned self] in try self.rich.purge(now: Date()) }
        context.loop.every(milliseconds: 3_600_000) { [unowned self] in
            try self.store.forgetSeen(before: Date().addingTimeInterval(-31 * 86_400))
        }
    }

    /// What the person does to a popup becomes the notification's state for the user everywhere;
    /// the popup ids the server gives are kept with the notifications they show.
    private func wire(_ desktop: DesktopNotifications, to userSync: AgentUserSync) {
        let logger = context.logger
        desktop.onUserAction = { id, action in
            do {
                try userSync.queueAction(id, action)
            } catch {
                logger.warning("could not keep what was done to a popup", ("notification", id), ("action", action.rawValue), ("error", "\(error)"))
            }
        }
        context.loop.every(milliseconds: 1_000) {
            if try userSync.pendingActions > 0 { userSync.sendActionsIfDue() }
        }
        desktop.onPopup = { id, popup, owner in
            do {
                try userSync.cache.setPopup(id, popup, owner: owner)
            } catch {
                logger.warning("could not keep a popup's id", ("notification", id), ("error", "\(error)"))
            }
        }
        desktop.onReshow = { owner in
            do {
                try userSync.reshow(owner: owner)
            } catch {
                logger.warning("could not show current notifications again", ("error", "\(error)"))
            }
        }
    }

    /// Registers again with the stored categories; the handle may have changed since last time.
    func register() {
        if let userSync, userSync.userId == nil, userSync.accessToken() == nil {
            registered = false
            return
        }
        do {
            try registerNow()
        } catch {
            registered = false
            let text = "\(error)"
            if text != lastRegistrationError {
                context.logger.warning("registration failed; retrying", ("error", text))
                lastRegistrationError = text
            }
        }
    }

    /// Registers with the stored categories now, throwing what the registry answered.
    func registerNow() throws {
        if let userSync, userSync.userId == nil, userSync.accessToken() == nil {
            registered = false
            throw HubError(.unavailable, "the user's token is not here yet; registering when it is")
        }
        try register(categories: try store.categories)
    }

    /// Registers with `categories`, throwing what the registry answered when it refused.
    func register(categories: [String]) throws {
        let installation = Installation(
            installationId: installationId, platform: "linux", pushChannel: keys.publicKey, tags: categories,
            userId: userId, templates: ["default": InstallationTemplate(body: template)], endpoints: try distributor.store.endpoints())
        registeredVersion = try registry.call(InstallationUpsert(installation: installation, userToken: userSync?.accessToken())).installation.version
        registered = true
        lastRegistrationError = ""
        // The registration stands whatever the channel does with the hello that follows.
        do {
            try perform(core.on(.registered, now: Date()))
        } catch {
            context.logger.warning("could not say hello after registering", ("error", "\(error)"))
        }
        context.logger.info("registered", ("installation", installationId), ("categories", categories.joined(separator: ",")))
    }

    /// Reads what the dispatcher sent, acting on each message, then acknowledges in one message.
    private func receive() throws {
        acknowledged = []
        failures = []
        while let frames = try channel.receive(wait: false) {
            let frame: AgentFrame
            do {
                guard frames.count == 1 else { throw HubError(.malformedFrames, "a message of \(frames.count) frames; the channel sends one") }
                frame = try AgentWire.decode(frames[0], installationId: installationId)
            } catch {
                context.logger.warning("unreadable message from the dispatcher", ("error", (error as? HubError)?.message ?? "\(error)"))
                continue
            }
            var seen = false
            if case .deliver(let delivery) = frame, delivery.rich == nil { seen = try store.isSeen(delivery.deliveryId) }
            try perform(core.on(.received(frame, seen: seen), now: Date()))
        }
        if !acknowledged.isEmpty || !failures.isEmpty { try acknowledge(acknowledged, failures: failures) }
    }

    private var lastRefusal = ""
    private var acknowledged: [String] = []
    private var unshown: Set<String> = []
    private var failures: [DeliveryFailure] = []

    private func perform(_ actions: [AgentCore.Action]) throws {
        for action in actions {
            switch action {
            case .hello:
                _ = try channel.send(AgentWire.encode(.hello(AgentHello(installationId: channelId, registered: registeredVersion))), wait: false)
            case .show(let delivery):
                // Shown, then remembered as seen, then acknowledged (after this batch): a crash
                // before the show leaves it unseen and unacknowledged, so it comes again and is shown;
                // a crash between show and remember shows it a second time, the one window for a
                // repeat; a crash after remembering acknowledges the repeat without showing it.
                // Output that would not take the line (a full disk) leaves it unseen and unacknowledged.
                let now = Date()
                guard output.show(delivery, now: now) else {
                    unshown.insert(delivery.deliveryId)
                    context.logger.warning("could not write a notification out; it comes again", ("delivery", delivery.deliveryId))
                    continue
                }
                _ = try store.markSeen(delivery.deliveryId, notificationId: delivery.notificationId, now: now)
            case .acknowledge(let id):
                if unshown.remove(id) == nil { acknowledged.append(id) }
            case .holdForFetch(let delivery):
                switch try rich.received(delivery, now: Date()) {
                case .acknowledge: acknowledged.append(delivery.deliveryId)
                case .fail(let failure): failures.append(failure)
                case .wait: break
                }
            case .handToApp(let delivery, let message):
                switch try distributor.received(delivery, message, now: Date()) {
                case .wait: break
                case .acknowledge: acknowledged.append(delivery.deliveryId)
                case .fail(let reason): failures.append(DeliveryFailure(deliveryId: delivery.deliveryId, reason: reason))
                }
            case .syncUser(let sequence):
                if let userSync, sequence > (try userSync.cache.cursor) { userSync.syncNow() }
            case .moveTo(let endpoint):
                context.logger.info("moving to another dispatcher", ("from", connectedTo), ("to", endpoint))
                try move(to: endpoint)
            case .log(let message, let code):
                if message != lastRefusal { context.logger.warning("dispatcher refused", ("code", code.rawValue), ("reason", message)) }
                lastRefusal = message
            }
        }
    }

    /// Connects the channel to another dispatcher, leaving the one it was connected to.
    private func move(to endpoint: String) throws {
        guard endpoint != connectedTo else { return }
        // Not connected there (the first move): nothing to leave.
        try? channel.disconnect(connectedTo)
        try channel.connect(endpoint)
        connectedTo = endpoint
    }

    private func acknowledge(_ deliveryIds: [String], failures: [DeliveryFailure] = []) throws {
        let ack = AgentAck(deliveryIds: deliveryIds, failures: failures.isEmpty ? nil : failures)
        _ = try channel.send(AgentWire.encode(.ack(ack)), wait: false)
    }
}

extension ZMQSocket {
    /// A CURVE DEALER to the dispatcher's agent socket with transport heartbeats and reconnect backoff.
    static func agentChannel(
        connect endpoint: String, keys: CurveKeyPair, serverKey: String, heartbeatMs: Int, timeoutMs: Int, context: ZMQContext = .shared
    ) throws -> ZMQSocket {
        let socket = try context.socket(.dealer)
        try socket.setLinger(0)
        try socket.makeCurveClient(keys, serverPublicKey: serverKey)
        // A jittered first interval spreads a crowd of agents reconnecting after a dispatcher restart.
        try socket.setReconnectInterval(100 + Int.random(in: 0..<900), max: 5_000)
        // No TTL: it would make the dispatcher arm a timer per agent (see its agent socket).
        try socket.setHeartbeat(interval: heartbeatMs, timeout: timeoutMs, ttl: 0)
        try socket.setSendHighWaterMark(1_000)
        try socket.connect(endpoint)
        return socket
    }
}
