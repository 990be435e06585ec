import Bus
import Foundation
import HubProtocol

/// Makes a service's bus sockets, all secured alike (see `BusSecurity`), served from its loop and
/// closed at its shutdown: request servers that answer health and metrics, change-stream
/// publishers and followers, and clients of other services.
public final class BusFactory {
    let runtime: ServiceRuntime
    /// The token requests to other services are signed with; nil where there are no keys.
    public var credential: () -> String? = { nil }
    /// The hub catalog's version as this service last read it (nil where there is none), which its
    /// health reports as `hubCatalog`.
    public var catalogVersion: () -> UInt64? = { nil }

    public init(runtime: ServiceRuntime) {
        self.runtime = runtime
    }

    /// Binds a request socket that answers health, and serves it from the loop.
    /// With `group`, the requests waiting at once share one commit (see `CommitGroup`).
    public func bindRequests(
        _ endpoint: String, role: String = "requests", group: CommitGroup? = nil, maxMessageBytes: Int? = nil, ownerOnly: Bool = false,
        endpoints: @escaping () -> [String: String], details: @escaping () -> [String: String]? = { nil }
    ) throws -> HubServer {
        let server = try HubServer(
            bind: endpoint, logger: runtime.logger, maxMessageBytes: maxMessageBytes ?? runtime.config.maxMessageBytes, curve: security?.serverKeys,
            ownerOnly: ownerOnly)
        server.defaultHub = runtime.config.hub.lowercased()
        servers.append(server)
        group?.onEffectError = { [logger = runtime.logger] error in
            logger.error("a step after a commit failed; what was committed stands", ("error", "\(error)"))
        }
        server.on(HealthRequest.self) { [unowned runtime, unowned self] _ in
            var reported = details()
            if let version = self.catalogVersion() { reported = (reported ?? [:]).merging(["hubCatalog": String(version)]) { $1 } }
            return runtime.health(endpoints(), details: reported)
        }
        server.on(MetricsRequest.self) { [unowned runtime, unowned server] _ in
            var samples = server.samples
            // Numeric details, such as queue depths and counts, become gauges.
            for (name, value) in details() ?? [:] {
                if let number = Double(value) { samples["nh_\(Self.snakeCase(name))"] = number }
            }
            samples["nh_uptime_seconds"] = runtime.uptimeSeconds
            return MetricsReply(service: runtime.name, samples: samples)
        }
        if let group {
            runtime.loop.watch(server.socket) { try server.serve(group: group) }
        } else {
            runtime.loop.watch(server.socket) { try server.serve() }
        }
        runtime.onShutdown { server.close() }
        runtime.logger.info("listening", ("role", role), ("endpoint", server.endpoint))
        return server
    }

    /// Binds a change-stream publisher that sends a heartbeat every `heartbeatMs`.
    public func bindEvents(_ endpoint: String, startingAfter sequence: UInt64) throws -> SequencedPublisher {
        let publisher = try SequencedPublisher(bind: [endpoint], startingAfter: sequence, curve: security?.serverKeys)
        runtime.loop.every(milliseconds: runtime.config.heartbeatMs) { try publisher.heartbeat() }
        runtime.onShutdown { publisher.close() }
        runtime.logger.info("publishing", ("role", "events"), ("endpoint", publisher.endpoints.first ?? endpoint))
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
        let logger = runtime.logger
        runtime.loop.watch(socket) {
            while let frames = try socket.receive(wait: false) {
                guard let message = Self.sequenced(frames, on: endpoint, logger: logger) else { continue }
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

    /// Follows a stream read in batches (the publish service's): each time messages arrive, `batch`
    /// gets those waiting, up to `limit`, heartbeats included, in the order they came; the rest
    /// wait on the socket for the loop's next pass, after its other sockets. Messages in another
    /// shape are passed over, with a log line.
    public func followBatches(_ endpoint: String, limit: Int = .max, batch: @escaping ([SequencedMessage]) throws -> Void) throws {
        let socket = try subscriber(endpoint)
        let logger = runtime.logger
        runtime.loop.watch(socket) {
            var messages: [SequencedMessage] = []
            while messages.count < limit, let frames = try socket.receive(wait: false) {
                guard let message = Self.sequenced(frames, on: endpoint, logger: logger) else { continue }
                messages.append(message)
            }
            try batch(messages)
        }
    }

    /// A followed stream's message; one in another shape is passed over with a log line, as one
    /// missed is (the next one's sequence shows the gap).
    private static func sequenced(_ frames: [Data], on endpoint: String, logger: Logger) -> SequencedMessage? {
        do {
            return try SequencedMessage(frames: frames)
        } catch {
            logger.warning("a message on a followed stream is not a stream message; passed over", ("endpoint", endpoint), ("error", "\(error)"))
            return nil
        }
    }

    /// A SUB socket on another service's stream, secured as the bus is, closed at shutdown.
    private func subscriber(_ endpoint: String) throws -> ZMQSocket {
        let socket = try ZMQContext.shared.socket(.sub)
        try socket.setLinger(0)
        if let security { try socket.makeCurveClient(security.clientKeys, serverPublicKey: security.serverPublicKey) }
        try socket.subscribe()
        try socket.connect(endpoint)
        runtime.onShutdown { socket.close() }
        return socket
    }

    /// A client of another service that sends its requests without waiting for their replies,
    /// signed with the service token; its socket is for the caller's loop to watch.
    public func forwarder(_ endpoint: String) throws -> HubForwarder {
        let forwarder = try HubForwarder(connect: endpoint, timeoutMs: runtime.config.requestTimeoutMs, curve: security?.client, auth: { [unowned self] in self.credential() })
        runtime.onShutdown { forwarder.close() }
        return forwarder
    }

    /// A client of another service, with the configured timeout and attempts.
    public func client(_ endpoint: String, policy: RetryPolicy? = nil) throws -> HubClient {
        let client = try HubClient(
            connect: endpoint, config: runtime.config, policy: policy, curve: security?.client, auth: { [unowned self] in self.credential() })
        runtime.onShutdown { client.close() }
        return client
    }

    /// How the sockets are secured, set by `secure`; nil (plain sockets) until then. Every socket
    /// the factory makes takes it from here.
    public private(set) var security: BusSecurity?
    /// What the ZAP handler's thread reads.
    let admission = BusAdmission()

    /// Makes `security` the factory's and starts the ZAP handler that enforces it. Call before
    /// binding any socket.
    public func secure(_ security: BusSecurity) throws {
        self.security = security
        admission.set(security)
        guard zap == nil else { return }
        let handler = try ZAPHandler { [admission] domain, key in admission.admits(domain: domain, key: key) }
        zap = handler
        runtime.onShutdown { handler.close() }
    }

    /// Admits the bus client keys of the hub catalog's policies (`HubDirectory.busKeys`), beside
    /// those the factory was secured with.
    public func admitHubKeys(_ keys: Set<String>) { admission.setHubKeys(keys) }

    /// Counts of handshakes the ZAP handler accepted and refused.
    public var handshakes: (accepted: Int, refused: Int) { zap?.counts ?? (0, 0) }
    private var zap: ZAPHandler?

    /// The request servers bound through `bindRequests`.
    private var servers: [HubServer] = []

    /// The peer of the request being handled, for counting a key's rate per connection.
    var currentPeer: Data? { servers.lazy.compactMap(\.currentPeer).first }

    static func snakeCase(_ name: String) -> String {
        var result = ""
        for character in name {
            if character.isUppercase { result += "_" + character.lowercased() } else { result.append(character) }
        }
        return result
    }
}
