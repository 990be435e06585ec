import CLibZMQ
import Foundation

/// Reports a socket's connection events (libzmq's socket monitor) on a PAIR socket that an event
/// loop can watch, such as a client learning that it reconnected and must introduce itself again.
public final class SocketMonitor {
    public struct Events: OptionSet, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        /// The security handshake (CURVE included) completed: the connection is usable.
        public static let handshakeSucceeded = Events(rawValue: 0x1000)
        /// The connection closed, as when the peer's heartbeats stopped; libzmq connects again.
        public static let disconnected = Events(rawValue: 0x0200)
        /// A connection attempt failed, as when nothing listens there; libzmq tries again.
        public static let connectRetried = Events(rawValue: 0x0004)
    }

    public let socket: ZMQSocket

    public init(watching target: ZMQSocket, events: Events, context: ZMQContext = .shared) throws(ZMQError) {
        let endpoint = "inproc://monitor-\(UUID().uuidString)"
        guard let handle = target.handle else { throw ZMQError(function: "zmq_socket_monitor", errno: ENOTSOCK) }
        try zmqCheck("zmq_socket_monitor") { zmq_socket_monitor(handle, endpoint, events.rawValue) }
        socket = try context.socket(.pair)
        try socket.setLinger(0)
        try socket.connect(endpoint)
    }

    /// The events waiting, without blocking.
    public func drain() throws(ZMQError) -> [Events] {
        try drainWithEndpoints().map(\.event)
    }

    /// The events waiting, each with the endpoint it happened on (such as tcp://10.0.0.11:7722),
    /// without blocking.
    public func drainWithEndpoints() throws(ZMQError) -> [(event: Events, endpoint: String)] {
        var events: [(event: Events, endpoint: String)] = []
        while let frames = try socket.receive(wait: false) {
            guard let first = frames.first, first.count >= 2 else { continue }
            let value = Int32(first[first.startIndex]) | Int32(first[first.startIndex + 1]) << 8
            events.append((Events(rawValue: value), frames.count > 1 ? String(decoding: frames[1], as: UTF8.self) : ""))
        }
        return events
    }

    public func close() { socket.close() }
}
