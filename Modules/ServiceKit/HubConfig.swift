import Foundation
import HubProtocol

/// Everything a service, the agent or the CLI needs to know, with a working default for every field:
/// all services on loopback, data in `./nh-data`. Each service binds its own endpoints and connects
/// to the others' from here.
public struct HubConfig: Codable, Sendable, Equatable {
    public var dataDir: String = "nh-data"
    /// Where the services keep their state: absent (or `sqlite`) for SQLite files in `dataDir`, or
    /// a PostgreSQL URL (`postgresql://user@host:5432/nh`) that several processes can share.
    /// The registry's, the publish service's, the sync store's and the dispatcher's stores are on it.
    public var store: String? = nil
    /// trace, debug, info, notice, warning or error.
    public var logLevel: String = "info"
    /// The largest request a service accepts; larger ones get `payload_too_large`.
    public var maxMessageBytes: Int = 1 << 20
    /// The largest rich payload a backend may send.
    public var maxRichBytes: Int = 4 << 20

    /// The most a request to the publish service may hold, the largest any service reads: a rich
    /// payload in base64 with room for its envelope, or `maxMessageBytes` if that is more.
    public var publishRequestBytes: Int { max(maxMessageBytes, maxRichBytes / 3 * 4 + 65_536) }
    /// Milliseconds a bus client waits for each reply attempt.
    public var requestTimeoutMs: Int = 2_000
    /// Attempts a bus client makes before giving up.
    public var requestAttempts: Int = 3
    /// Milliseconds between change-stream heartbeats.
    public var heartbeatMs: Int = 1_000
    /// How long a dispatcher's lease on its shards lasts: three service heartbeats, at least 3 s.
    /// The agents that use several dispatchers time their moves by it too.
    public var leasePeriodMs: Int { max(3_000, 3 * heartbeatMs) }
    /// Milliseconds between an agent's hellos on its channel, and between libzmq's own heartbeats
    /// there (with one dispatcher; `agentTransportHeartbeat`). The dispatcher ends a session after
    /// three of them without a word, or at once when the agent says bye as it stops. With one
    /// dispatcher, each connected agent costs it two messages an interval (a hello, and a transport
    /// heartbeat with its answer), so the default is of the order of MQTT's keep-alive.
    public var agentHeartbeatMs: Int = 30_000
    /// Seconds a notification stays deliverable when its sender gives no time to live.
    public var defaultTimeToLive: Int = 86_400
    /// Seconds a user token lives before the agent trades its credential for a fresh one.
    public var userTokenLifetime: Int = 3_600
    /// The namespace address that shared-access tokens are signed for; the HTTP gateway's address.
    public var namespace: String = "http://127.0.0.1:7780/"
    /// The hub's name under the namespace.
    public var hub: String = "hub"

    public var registry = Endpoints(requests: "tcp://127.0.0.1:7701", events: "tcp://127.0.0.1:7702")
    public var publish = Endpoints(requests: "tcp://127.0.0.1:7711", events: "tcp://127.0.0.1:7712")
    public var dispatch = Endpoints(requests: "tcp://127.0.0.1:7721", agents: "tcp://127.0.0.1:7722")
    public var sync = Endpoints(requests: "tcp://127.0.0.1:7731", events: "tcp://127.0.0.1:7732")
    /// The agent's local control socket. By default a Unix socket in the agent's home
    /// (`AGENT_HOME` stands for it) that only the agent's user can reach; a tcp:// endpoint is
    /// reachable by every local user who holds the listen key, so it is for a host of one user.
    public var agent = Endpoints(requests: "ipc://AGENT_HOME/control.sock")
    public var gateway = Endpoints(requests: "tcp://127.0.0.1:7781")
    /// Where the HTTP gateway listens, as ADDRESS:PORT.
    public var gatewayListen: String = "127.0.0.1:7780"
    /// PEM files that turn on HTTPS at the gateway; both or neither.
    public var gatewayCertificate: String? = nil
    public var gatewayKey: String? = nil
    /// The folder with the console and inbox pages the gateway serves. Absent: the pages installed
    /// beside `nh-gateway` (`NotificationHub_NHGateway.resources/Web`).
    public var webRoot: String? = nil

    /// Whether `store` names a PostgreSQL server.
    public var storeIsPostgres: Bool {
        guard let store else { return false }
        return store.hasPrefix("postgresql://") || store.hasPrefix("postgres://")
    }

    /// The platforms' own push services the dispatcher delivers to (APNs, FCM, Web Push), with
    /// their credentials. None by default: only Linux agents are delivered to.
    public var push = PushSettings()

    /// What one client, agent or store may use; each refusal names the setting.
    public var limits = Limits()

    public init() {}

    public struct Limits: Codable, Sendable, Equatable {
        /// Tags one installation may carry.
        public var tagsPerInstallation: Int = 60
        /// Bytes of one tag expression.
        public var expressionBytes: Int = 4_096
        /// Requests per second that one access key may make of one service, with bursts of twice
        /// as many; 0 for no limit. Calls between services are not counted.
        public var requestsPerSecondPerKey: Int = 0
        /// Each hub's own limits, unless the hub has its own (`nhctl hub limits`); 0 for no limit.
        /// Requests per second to one service for one hub, from all its keys (bursts of twice as
        /// many); calls between services are not counted.
        public var requestsPerSecondPerHub: Int = 0
        /// Sends per second one hub may make (bursts of twice as many).
        public var sendsPerSecondPerHub: Int = 0
        /// Installations one hub may hold; a new one beyond it is refused.
        public var installationsPerHub: Int = 0
        /// Messages per second that one agent may send on its channel, with bursts of twice as many.
        public var agentMessagesPerSecond: Int = 200
        /// Agents one dispatcher serves at once; a hello beyond it is refused.
        public var agents: Int = 100_000
        /// Bytes each service's store may take; 0 for as much as the disk has.
        public var storeBytes: Int = 0
        /// HTTP requests the gateway serves at once, each on a thread of its own.
        public var httpThreads: Int = 8
        /// HTTP connections the gateway holds at once, and from one client address.
        public var httpConnections: Int = 10_000
        public var httpConnectionsPerAddress: Int = 256
        /// Seconds an HTTP connection may stay idle before the gateway closes it.
        public var httpIdleSeconds: Int = 30
        /// Pushes per second that one push endpoint (an app's, UnifiedPush or Web Push) takes, with
        /// bursts of twice as many; beyond it the gateway answers 429 with Retry-After.
        public var pushesPerSecondPerEndpoint: Int = 100
        /// Lines of a bulk job applied in one transaction; a job stopped at any point goes on after
        /// its last whole batch.
        public var jobBatchLines: Int = 5_000

        public init() {}
    }

    /// A service's bound endpoints. `requests` is where it answers request/reply, health included.
    public struct Endpoints: Codable, Sendable, Equatable {
        public var requests: String
        /// The change stream it publishes, for services that own one.
        public var events: String?
        /// Where agents connect, for the dispatcher.
        public var agents: String?
        /// For a dispatcher that shares the agents with others: the endpoint agents reach it at,
        /// which the others redirect them to, and which names it among them. Absent: `agents`.
        public var advertise: String?
        /// For dispatchers that share a store: the request endpoints of the others, separated by
        /// commas. A gateway and nhctl ask them for an outcome when `requests` does not answer.
        public var peers: String?

        public init(requests: String, events: String? = nil, agents: String? = nil, advertise: String? = nil, peers: String? = nil) {
            self.requests = requests
            self.events = events
            self.agents = agents
            self.advertise = advertise
            self.peers = peers
        }
    }

    /// The resource URI every bus request is authorized against: the namespace, then the hub.
    public var hubResource: String {
        (namespace.hasSuffix("/") ? namespace : namespace + "/") + hub
    }

    /// The transport heartbeats (libzmq's ZMTP PING and PONG) on an agent's channel to `dispatchers`
    /// dispatchers: how often the agent pings, and how long it waits for any answer before it takes
    /// the connection for dead and connects again. With one dispatcher, every `agentHeartbeatMs`,
    /// answered within three of them or 10 s more, whichever is less, so that a link that dies
    /// silently is found within two intervals and 10 s (70 s at the default). With several, every
    /// lease period (three service heartbeats, at least 3 s; or `agentHeartbeatMs`, if shorter),
    /// answered within one, so that an agent leaves a dispatcher that stopped answering within two
    /// lease periods, as another takes its shards. Each ping costs the dispatcher a message and its
    /// answer for every connected agent: at every service heartbeat, 10,000 agents cost two
    /// dispatchers more than their work split between them saved.
    public func agentTransportHeartbeat(dispatchers: Int) -> (intervalMs: Int, timeoutMs: Int) {
        if dispatchers > 1 { return (min(agentHeartbeatMs, leasePeriodMs), leasePeriodMs) }
        return (agentHeartbeatMs, min(3 * agentHeartbeatMs, agentHeartbeatMs + 10_000))
    }

    /// The dispatchers an agent may connect to: `dispatch.agents`, one endpoint or several
    /// separated by commas. Any of them serves or redirects.
    public static func dispatcherEndpoints(_ setting: String?) -> [String] {
        let list = (setting ?? "tcp://127.0.0.1:7722").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return list.isEmpty ? ["tcp://127.0.0.1:7722"] : list
    }

    /// The placeholder in `agent.requests` for the agent's home folder.
    public static let agentHomePlaceholder = "AGENT_HOME"

    /// `agent.requests` for the agent whose home is `home`.
    public func agentControl(home: URL) -> String {
        agent.requests.replacingOccurrences(of: Self.agentHomePlaceholder, with: home.standardizedFileURL.path)
    }

    /// Where outcomes are read: this host's dispatcher (`dispatch.requests`), then `dispatch.peers`.
    public var outcomeEndpoints: [String] {
        [dispatch.requests] + (dispatch.peers ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// The request endpoint of each service, by executable name, in start order.
    public var serviceEndpoints: [(service: String, endpoints: Endpoints)] {
        [
            ("nh-registry", registry),
            ("nh-sync", sync),
            ("nh-dispatch", dispatch),
            ("nh-publish", publish),
            ("nh-agent", agent),
            ("nh-gateway", gateway),
        ]
    }
}
