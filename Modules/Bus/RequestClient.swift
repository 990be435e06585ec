import Foundation

/// How a `RequestClient` waits and retries.
public struct RetryPolicy: Sendable, Equatable {
    /// Milliseconds to wait for each attempt's reply.
    public var timeout: Int
    /// Attempts in all, the first one included.
    public var attempts: Int

    public init(timeout: Int = 2_000, attempts: Int = 3) {
        self.timeout = timeout
        self.attempts = max(1, attempts)
    }
}

/// The client side of request/reply, in the "lazy pirate" shape: send, wait for a matching reply,
/// and on timeout drop the socket, reconnect and send again. Callers put an idempotency key in the
/// request when a repeat must not act twice.
public final class RequestClient {
    public let endpoint: String
    public var policy: RetryPolicy
    private let context: ZMQContext
    private let curve: (keys: CurveKeyPair, serverPublicKey: String)?
    private var socket: ZMQSocket
    private var poller = Poller()

    public init(
        context: ZMQContext = .shared, connect endpoint: String, policy: RetryPolicy = RetryPolicy(),
        curve: (keys: CurveKeyPair, serverPublicKey: String)? = nil
    ) throws(ZMQError) {
        self.context = context
        self.endpoint = endpoint
        self.policy = policy
        self.curve = curve
        socket = try RequestClient.makeSocket(context: context, endpoint: endpoint, curve: curve)
        poller.add(socket)
    }

    private static func makeSocket(
        context: ZMQContext, endpoint: String, curve: (keys: CurveKeyPair, serverPublicKey: String)?
    ) throws(ZMQError) -> ZMQSocket {
        let socket = try context.socket(.dealer)
        try socket.setLinger(0)
        try socket.setReconnectInterval(100, max: 2_000)
        if let curve { try socket.makeCurveClient(curve.keys, serverPublicKey: curve.serverPublicKey) }
        try socket.connect(endpoint)
        return socket
    }

    /// Sends `body` and returns the first reply for which `isReply` is true.
    /// Replies that do not match, such as late answers to an earlier attempt, are dropped.
    public func request(_ body: [Data], isReply: ([Data]) -> Bool = { _ in true }) throws -> [Data] {
        for attempt in 1...policy.attempts {
            if attempt > 1 { try reconnect() }
            guard try socket.send([Data()] + body, wait: false) else { continue }
            if let reply = try awaitReply(isReply) { return reply }
        }
        throw BusError.timeout(endpoint: endpoint, attempts: policy.attempts)
    }

    private func awaitReply(_ isReply: ([Data]) -> Bool) throws -> [Data]? {
        let deadline = ContinuousClock.now + .milliseconds(policy.timeout)
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            if left <= .zero { return nil }
            let milliseconds = Int(left.components.seconds * 1_000 + left.components.attoseconds / 1_000_000_000_000_000)
            guard try !poller.poll(timeout: max(1, milliseconds)).isEmpty else { continue }
            while let frames = try socket.receive(wait: false) {
                let body = frames.first?.isEmpty == true ? Array(frames.dropFirst()) : frames
                if isReply(body) { return body }
            }
        }
    }

    /// Drops the socket and its queued messages, and connects afresh.
    public func reconnect() throws(ZMQError) {
        socket.close()
        socket = try RequestClient.makeSocket(context: context, endpoint: endpoint, curve: curve)
        poller.replace(0, with: socket)
    }

    public func close() { socket.close() }
}
