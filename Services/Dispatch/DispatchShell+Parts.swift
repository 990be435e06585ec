import Bus
import Foundation
import ServiceKit

extension DispatchShell {
    /// The agents' socket. Agents connect from other hosts over CURVE, through the hub's bus key;
    /// its ZAP domain lets any agent key through the handshake, and a hello is then accepted only
    /// for an installation bound to the key the connection was authenticated with.
    static func agentSocket(_ context: ServiceContext) throws -> ZMQSocket {
        guard let busKeys = context.bus.security?.serverKeys else { throw ConfigError("the bus is not secured") }
        let endpoint = context.config.dispatch.agents ?? "tcp://127.0.0.1:7722"
        guard !endpoint.contains(",") else {
            throw ConfigError("dispatch.agents '\(endpoint)' lists several endpoints; a dispatcher binds one (agents may be given several)")
        }
        let agents = try ZMQSocket.agentServer(bind: endpoint, keys: busKeys, config: context.config)
        context.onShutdown { agents.close() }
        context.logger.info("listening", ("role", "agents"), ("endpoint", agents.lastEndpoint))
        return agents
    }

    /// The deliveries' store: PostgreSQL, shared with other dispatchers by shard, or SQLite. It can
    /// lose its last commits to a power cut without losing anything: the cursor then points back
    /// into the publish service's durable log, the notifications are planned again, lost
    /// acknowledgements make their deliveries go out again, and agents show each once.
    static func openStore(_ context: ServiceContext, advertise: String, leasePeriod: Double) throws -> any DeliveryStore {
        if context.config.storeIsPostgres, advertise.contains("0.0.0.0") || advertise.contains("*") {
            throw ConfigError("dispatch.advertise must be an address agents can reach, not '\(advertise)'; set it to this host's address and port")
        }
        let store: any DeliveryStore = try context.stores.choose(
            schema: PostgresDeliveryStore.schema,
            postgres: { try PostgresDeliveryStore(url: $0, limits: .init(leasePeriod: leasePeriod, dispatcher: advertise)) },
            sqlite: {
                try SQLiteDeliveryStore(
                    database: try context.stores.open("dispatch.db", migrations: SQLiteDeliveryStore.migrations, synchronous: "NORMAL"))
            })
        context.onShutdown {
            let held = store.held
            do {
                try store.close()
            } catch {
                context.logger.error(
                    "the last group of writes was not committed; it is planned again from the publish service's log at the next start",
                    ("heldDeliveries", held), ("error", "\(error)"))
            }
        }
        return store
    }
}

extension ZMQSocket {
    /// The dispatcher's agent socket: a CURVE ROUTER whose handshakes go through the ZAP handler.
    /// Sends to a connection that is gone fail at once (so its session ends), and the queue per
    /// agent holds more than a session's window.
    ///
    /// The socket arms no timer per connection: libzmq cancels a timer by scanning every timer of
    /// its I/O thread, so a heartbeat or handshake timer per agent would make each message cost
    /// O(agents). Liveness comes from the agents' hellos (a session ends after three heartbeats
    /// of silence) and from TCP keepalive, which closes connections whose host has gone.
    static func agentServer(bind endpoint: String, keys: CurveKeyPair, config: HubConfig) throws -> ZMQSocket {
        let socket = try ZMQContext.shared.socket(.router)
        try socket.setLinger(0)
        try socket.setRouterMandatory(true)
        try socket.setSendHighWaterMark(4_096)
        try socket.setReceiveHighWaterMark(100_000)
        try socket.setMaxMessageSize(config.maxMessageBytes + 4_096 + ZMQSocket.curveFrameOverhead)
        try socket.setHandshakeInterval(0)
        try socket.setTCPKeepalive(idle: 60, interval: 10, count: 3)
        try socket.setBacklog(65_535)
        try socket.makeCurveServer(keys, domain: ZAPHandler.agentDomain)
        try socket.bind(endpoint)
        return socket
    }
}
