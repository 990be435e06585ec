import Foundation

/// The owner's side of a change stream: a PUB socket that numbers every message.
/// The owner keeps the sequence durable (it passes the last one in at start) so that readers
/// never see it go back.
public final class SequencedPublisher {
    public let socket: ZMQSocket
    public private(set) var sequence: UInt64
    public private(set) var endpoints: [String] = []

    public init(
        context: ZMQContext = .shared, bind endpoints: [String], startingAfter sequence: UInt64 = 0,
        curve: CurveKeyPair? = nil, sendHighWaterMark: Int = 100_000
    ) throws(ZMQError) {
        socket = try context.socket(.pub)
        try socket.setLinger(0)
        // Set before bind: a listener copies the socket's options when it is bound.
        try socket.setSendHighWaterMark(sendHighWaterMark)
        if let curve { try socket.makeCurveServer(curve) }
        for endpoint in endpoints {
            try socket.bind(endpoint)
            self.endpoints.append(socket.lastEndpoint)
        }
        self.sequence = sequence
    }

    /// Publishes `body` under the next sequence number and returns that number.
    @discardableResult
    public func publish(topic: String, body: Data) throws(ZMQError) -> UInt64 {
        sequence += 1
        try socket.send(SequencedMessage(topic: topic, sequence: sequence, body: body).frames, wait: false)
        return sequence
    }

    /// Publishes under a number the owner assigned itself, as when it numbers changes in its store.
    public func publish(topic: String, sequence: UInt64, body: Data) throws(ZMQError) {
        precondition(sequence > self.sequence, "sequence numbers only go forward")
        self.sequence = sequence
        try socket.send(SequencedMessage(topic: topic, sequence: sequence, body: body).frames, wait: false)
    }

    /// Moves the sequence forward to `sequence` without a message, as when the owner's numbers went
    /// on from a higher one (a store that failed over numbers its new history above the old one);
    /// readers learn it from the next heartbeat, and read again from the owner.
    public func advance(to sequence: UInt64) {
        if sequence > self.sequence { self.sequence = sequence }
    }

    /// Tells readers the latest sequence, so one that missed the last messages finds out.
    public func heartbeat() throws(ZMQError) {
        try socket.send(
            SequencedMessage(topic: SequencedMessage.heartbeatTopic, sequence: sequence, body: Data()).frames,
            wait: false)
    }

    public func close() { socket.close() }
}
