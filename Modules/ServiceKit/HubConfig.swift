/// Everything a service, the agent or the CLI needs to know, with a working default for every field:
/// all services on loopback, data in `./nh-data`. Each service binds its own endpoints and connects
/// to the others' from here.
public struct HubConfig: Codable, Sendable, Equatable {
    public var dataDir: String = "nh-data"
    /// trace, debug, info, notice, warning or error.
    public var logLevel: String = "info"
    /// The largest request a service accepts; larger ones get `payload_too_large`.
    public var maxMessageBytes: Int = 1 << 20
    /// The largest rich payload a backend may send.
    public var maxRichBytes: Int = 4 << 20
    /// Milliseconds a bus client waits for each reply attempt.
    public var requestTimeoutMs: Int = 2_000
    /// Attempts a bus client makes before giving up.
    public var requestAttempts: Int = 3
    /// Milliseconds between change-stream heartbeats.
    public var heartbeatMs: Int = 1_000
    /// Milliseconds between an agent's hellos on its channel, and between libzmq's own heartbeats
    /// there. The dispatcher ends a session after three of them without a word.
    public var agentHeartbeatMs: Int = 5_000
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
    public var agent = Endpoints(requests: "tcp://127.0.0.1:7741")
    public var gateway = Endpoints(requests: "tcp://127.0.0.1:7781")
    /// Where the HTTP gateway listens, as ADDRESS:PORT.
    public var gatewayListen: String = "127.0.0.1:7780"
    /// PEM files that turn on HTTPS at the gateway; both or neither.
    public var gatewayCertificate: String? = nil
    public var gatewayKey: String? = nil

    public init() {}

    /// A service's bound endpoints. `requests` is where it answers request/reply, health included.
    public struct Endpoints: Codable, Sendable, Equatable {
        public var requests: String
        /// The change stream it publishes, for services that own one.
        public var events: String?
        /// Where agents connect, for the dispatcher.
        public var agents: String?

        public init(requests: String, events: String? = nil, agents: String? = nil) {
            self.requests = requests
            self.events = events
            self.agents = agents
        }
    }

    /// The resource URI every bus request is authorized against: the namespace, then the hub.
    public var hubResource: String {
        (namespace.hasSuffix("/") ? namespace : namespace + "/") + hub
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
