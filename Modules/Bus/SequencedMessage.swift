import Foundation

/// One message of an owner's change stream: a topic, the owner's sequence number, and a body.
/// On the wire: [topic, 8-byte big-endian sequence, body].
public struct SequencedMessage: Sendable, Equatable {
    /// The topic every heartbeat carries. Heartbeats carry the owner's latest sequence and no body.
    public static let heartbeatTopic = "~hb"

    public let topic: String
    public let sequence: UInt64
    public let body: Data

    public init(topic: String, sequence: UInt64, body: Data) {
        self.topic = topic
        self.sequence = sequence
        self.body = body
    }

    public var isHeartbeat: Bool { topic == SequencedMessage.heartbeatTopic }

    public var frames: [Data] {
        var big = sequence.bigEndian
        return [Data(topic.utf8), Data(bytes: &big, count: 8), body]
    }

    public init(frames: [Data]) throws(BusError) {
        guard frames.count == 3 else {
            throw BusError.malformedMessage("a sequenced message has 3 frames, got \(frames.count)")
        }
        guard frames[1].count == 8 else {
            throw BusError.malformedMessage("the sequence frame has 8 bytes, got \(frames[1].count)")
        }
        guard let topic = String(data: frames[0], encoding: .utf8) else {
            throw BusError.malformedMessage("the topic is not UTF-8")
        }
        self.topic = topic
        sequence = frames[1].reduce(UInt64(0)) { ($0 << 8) | UInt64($1) }
        body = frames[2]
    }
}
