import CLibZMQ
import Foundation

extension ZMQSocket {
    /// How long, in milliseconds, unsent messages are kept after close. -1 waits for ever.
    public func setLinger(_ milliseconds: Int) throws(ZMQError) {
        try setOption(ZMQ_LINGER, name: "ZMQ_LINGER", Int32(milliseconds))
    }

    public func setSendHighWaterMark(_ messages: Int) throws(ZMQError) {
        try setOption(ZMQ_SNDHWM, name: "ZMQ_SNDHWM", Int32(messages))
    }

    public func setReceiveHighWaterMark(_ messages: Int) throws(ZMQError) {
        try setOption(ZMQ_RCVHWM, name: "ZMQ_RCVHWM", Int32(messages))
    }

    /// Milliseconds a blocking receive waits before returning nil. -1 waits for ever.
    public func setReceiveTimeout(_ milliseconds: Int) throws(ZMQError) {
        try setOption(ZMQ_RCVTIMEO, name: "ZMQ_RCVTIMEO", Int32(milliseconds))
    }

    /// Milliseconds a blocking send waits before returning false. -1 waits for ever.
    public func setSendTimeout(_ milliseconds: Int) throws(ZMQError) {
        try setOption(ZMQ_SNDTIMEO, name: "ZMQ_SNDTIMEO", Int32(milliseconds))
    }

    /// The identity a ROUTER peer sees for this socket.
    public func setRoutingID(_ id: Data) throws(ZMQError) {
        try setOption(ZMQ_ROUTING_ID, name: "ZMQ_ROUTING_ID", [UInt8](id))
    }

    /// What CURVE adds to each frame on the wire (the MESSAGE command's name, its nonce, a flags
    /// byte and the box's MAC), which libzmq counts against `ZMQ_MAXMSGSIZE` before decrypting.
    public static let curveFrameOverhead = 33

    /// The largest inbound message accepted; a peer sending more is disconnected. -1 is no limit.
    public func setMaxMessageSize(_ bytes: Int) throws(ZMQError) {
        try setOption(ZMQ_MAXMSGSIZE, name: "ZMQ_MAXMSGSIZE", Int64(bytes))
    }

    /// On a ROUTER, fail sends to unknown peers instead of dropping them silently.
    /// On an ipc:// socket bound after this: only processes of this user may connect (libzmq checks
    /// the peer's credentials, SO_PEERCRED, as each connection is accepted).
    public func setIPCFilterUser(_ uid: UInt32) throws(ZMQError) {
        try setOption(ZMQ_IPC_FILTER_UID, name: "ZMQ_IPC_FILTER_UID", Int32(bitPattern: uid))
    }

    public func setRouterMandatory(_ on: Bool) throws(ZMQError) {
        try setOption(ZMQ_ROUTER_MANDATORY, name: "ZMQ_ROUTER_MANDATORY", Int32(on ? 1 : 0))
    }

    /// Queue messages only to completed connections.
    public func setImmediate(_ on: Bool) throws(ZMQError) {
        try setOption(ZMQ_IMMEDIATE, name: "ZMQ_IMMEDIATE", Int32(on ? 1 : 0))
    }

    /// Reconnect backoff: the first interval, and the cap it doubles up to.
    public func setReconnectInterval(_ milliseconds: Int, max: Int) throws(ZMQError) {
        try setOption(ZMQ_RECONNECT_IVL, name: "ZMQ_RECONNECT_IVL", Int32(milliseconds))
        try setOption(ZMQ_RECONNECT_IVL_MAX, name: "ZMQ_RECONNECT_IVL_MAX", Int32(max))
    }

    /// ZMTP heartbeats: a PING every `interval` ms; the connection drops after `timeout` ms without traffic.
    public func setHeartbeat(interval: Int, timeout: Int, ttl: Int? = nil) throws(ZMQError) {
        try setOption(ZMQ_HEARTBEAT_IVL, name: "ZMQ_HEARTBEAT_IVL", Int32(interval))
        try setOption(ZMQ_HEARTBEAT_TIMEOUT, name: "ZMQ_HEARTBEAT_TIMEOUT", Int32(timeout))
        try setOption(ZMQ_HEARTBEAT_TTL, name: "ZMQ_HEARTBEAT_TTL", Int32(ttl ?? timeout))
    }

    /// How many connections may wait to be accepted on a bound TCP endpoint (the listen backlog).
    public func setBacklog(_ connections: Int) throws(ZMQError) {
        try setOption(ZMQ_BACKLOG, name: "ZMQ_BACKLOG", Int32(connections))
    }

    /// TCP keepalive: probes after `idle` seconds of silence, every `interval` seconds, `count` times
    /// before the connection is closed.
    public func setTCPKeepalive(idle: Int, interval: Int, count: Int) throws(ZMQError) {
        try setOption(ZMQ_TCP_KEEPALIVE, name: "ZMQ_TCP_KEEPALIVE", Int32(1))
        try setOption(ZMQ_TCP_KEEPALIVE_IDLE, name: "ZMQ_TCP_KEEPALIVE_IDLE", Int32(idle))
        try setOption(ZMQ_TCP_KEEPALIVE_INTVL, name: "ZMQ_TCP_KEEPALIVE_INTVL", Int32(interval))
        try setOption(ZMQ_TCP_KEEPALIVE_CNT, name: "ZMQ_TCP_KEEPALIVE_CNT", Int32(count))
    }

    /// Milliseconds a connection may take for its handshake, CURVE included.
    public func setHandshakeInterval(_ milliseconds: Int) throws(ZMQError) {
        try setOption(ZMQ_HANDSHAKE_IVL, name: "ZMQ_HANDSHAKE_IVL", Int32(milliseconds))
    }

    /// The descriptor that becomes readable when the socket's state may have changed (ZMQ_FD), for
    /// watching many sockets with epoll. It only hints: check `hasIncoming` and read until nothing is left.
    public var fileDescriptor: Int32 {
        get throws(ZMQError) { try intOption(ZMQ_FD, name: "ZMQ_FD") }
    }

    /// Whether a message is waiting (ZMQ_EVENTS has POLLIN).
    public var hasIncoming: Bool {
        get throws(ZMQError) { try intOption(ZMQ_EVENTS, name: "ZMQ_EVENTS") & Int32(ZMQ_POLLIN) != 0 }
    }

    /// On a SUB, receive messages whose first frame starts with `prefix`. Empty means everything.
    public func subscribe(_ prefix: Data = Data()) throws(ZMQError) {
        try setOption(ZMQ_SUBSCRIBE, name: "ZMQ_SUBSCRIBE", [UInt8](prefix))
    }

    public func subscribe(_ prefix: String) throws(ZMQError) {
        try subscribe(Data(prefix.utf8))
    }

    public func unsubscribe(_ prefix: Data) throws(ZMQError) {
        try setOption(ZMQ_UNSUBSCRIBE, name: "ZMQ_UNSUBSCRIBE", [UInt8](prefix))
    }

}
