import Foundation

/// One request as a ROUTER sees it: the route back to the peer, and the body frames.
public struct RoutedRequest: Sendable {
    /// Identity frame, plus the empty delimiter when the peer sent one (REQ, or a DEALER imitating it).
    public let route: [Data]
    /// Everything after the route. May be empty when a peer sent only a delimiter.
    public let body: [Data]

    /// Splits a ROUTER message into route and body.
    public init(frames: [Data]) {
        guard let identity = frames.first else {
            route = []
            body = []
            return
        }
        if frames.count > 1, frames[1].isEmpty {
            route = [identity, Data()]
            body = Array(frames.dropFirst(2))
        } else {
            route = [identity]
            body = Array(frames.dropFirst())
        }
    }
}

/// The server side of request/reply: a ROUTER that hands each request to a handler and sends its reply.
/// Replies go back on the route they came from, so REQ and DEALER peers both work.
public final class RequestServer {
    public let socket: ZMQSocket
    public private(set) var endpoints: [String] = []

    public struct Options: Sendable {
        /// Inbound messages larger than this disconnect the peer. -1: no limit. It is the size a
        /// client sends: on a CURVE socket the frame's encryption is allowed for.
        public var maxMessageSize: Int = -1
        /// When set, the socket is a CURVE server with these keys.
        public var curve: CurveKeyPair? = nil
        public var sendHighWaterMark: Int = 10_000
        public var receiveHighWaterMark: Int = 10_000
        /// For ipc:// endpoints: only this process's user may connect (checked by the kernel's peer
        /// credentials), and the socket file is made 0600.
        public var ownerOnly = false

        public init(maxMessageSize: Int = -1, curve: CurveKeyPair? = nil) {
            self.maxMessageSize = maxMessageSize
            self.curve = curve
        }
    }

    public init(context: ZMQContext = .shared, bind endpoints: [String], options: Options = Options()) throws(ZMQError) {
        socket = try context.socket(.router)
        try socket.setLinger(0)
        try socket.setSendHighWaterMark(options.sendHighWaterMark)
        try socket.setReceiveHighWaterMark(options.receiveHighWaterMark)
        if options.maxMessageSize >= 0 {
            try socket.setMaxMessageSize(options.maxMessageSize + (options.curve == nil ? 0 : ZMQSocket.curveFrameOverhead))
        }
        if let keys = options.curve { try socket.makeCurveServer(keys) }
        if options.ownerOnly { try socket.setIPCFilterUser(getuid()) }
        for endpoint in endpoints {
            try socket.bind(endpoint)
            self.endpoints.append(socket.lastEndpoint)
            if options.ownerOnly, endpoint.hasPrefix("ipc://") {
                let path = String(endpoint.dropFirst("ipc://".count))
                guard chmod(path, 0o600) == 0 else { throw ZMQError(function: "chmod(\(path), 0600)", errno: errno) }
            }
        }
    }

    /// Handles requests already waiting, at most `limit`, without blocking.
    /// The handler returns the reply body, or nil to send no reply (dropping the request, or replying later).
    /// Returns how many requests were handled.
    @discardableResult
    public func serve(limit: Int = 256, _ handler: (RoutedRequest) -> [Data]?) throws(ZMQError) -> Int {
        var handled = 0
        while handled < limit, let frames = try socket.receive(wait: false) {
            handled += 1
            let request = RoutedRequest(frames: frames)
            guard !request.route.isEmpty, let reply = handler(request) else { continue }
            try self.reply(to: request.route, reply)
        }
        return handled
    }

    /// Sends a reply on a route. A peer that has gone away is skipped silently, as ROUTER does.
    public func reply(to route: [Data], _ body: [Data]) throws(ZMQError) {
        _ = try socket.send(route + body, wait: false)
    }

    public func close() { socket.close() }
}
