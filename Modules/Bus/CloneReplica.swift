import Foundation

/// The reader's side of a change stream (the Clone pattern): a SUB socket, a snapshot taken over
/// request/reply, and in-order application of the messages that follow it. A gap or an owner that
/// went back triggers a new snapshot, so a lost message costs a snapshot, never a change.
public final class CloneReplica {
    public let socket: ZMQSocket
    public private(set) var tracker = SequenceTracker()
    /// How many snapshots were taken, the first one included.
    public private(set) var snapshots = 0
    /// How many messages arrived in a shape that is not a sequenced message.
    public private(set) var malformed = 0
    /// Whether a message came on the stream since the last snapshot was taken, or the snapshot was
    /// taken because of one. Until then the subscription may not have reached the owner (libzmq
    /// sends it on its own time), and a change published meanwhile may be lost with nothing to show
    /// the gap until the next heartbeat: the snapshot is the owner's state, the stream not yet known
    /// to follow it. A reader that must not act on a stale copy waits for this.
    public private(set) var confirmed = false

    private let snapshot: () throws -> UInt64
    private let apply: (SequencedMessage) throws -> Void

    /// - Parameters:
    ///   - snapshot: loads the owner's whole state and returns the sequence it was taken at.
    ///   - apply: applies one change that follows the snapshot.
    public init(
        context: ZMQContext = .shared, connect endpoint: String,
        curve: (keys: CurveKeyPair, serverPublicKey: String)? = nil,
        snapshot: @escaping () throws -> UInt64,
        apply: @escaping (SequencedMessage) throws -> Void
    ) throws(ZMQError) {
        socket = try context.socket(.sub)
        try socket.setLinger(0)
        try socket.setReceiveHighWaterMark(100_000)
        if let curve { try socket.makeCurveClient(curve.keys, serverPublicKey: curve.serverPublicKey) }
        try socket.subscribe()
        try socket.connect(endpoint)
        self.snapshot = snapshot
        self.apply = apply
    }

    /// Takes a snapshot now. Messages that arrived meanwhile wait in the socket and are
    /// matched against the snapshot's sequence by `pump`.
    public func resync() throws {
        let sequence = try snapshot()
        snapshots += 1
        tracker.reset(to: sequence)
        confirmed = false
    }

    /// Handles messages already waiting, at most `limit`, without blocking. Returns how many were applied.
    @discardableResult
    public func pump(limit: Int = 1_000) throws -> Int {
        if tracker.position == nil { try resync() }
        var applied = 0
        var seen = 0
        while seen < limit, let frames = try socket.receive(wait: false) {
            seen += 1
            guard let message = try? SequencedMessage(frames: frames) else {
                malformed += 1
                continue
            }
            switch tracker.observe(message.sequence, heartbeat: message.isHeartbeat) {
            case .apply:
                try apply(message)
                applied += 1
            case .skip:
                break
            case .resync:
                try resync()
                // The message that revealed the gap may be the next one after the new snapshot.
                if !message.isHeartbeat, tracker.observe(message.sequence) == .apply {
                    try apply(message)
                    applied += 1
                }
            }
            // A message came: the subscription was in place before it was sent, and so before any
            // snapshot taken from here on.
            confirmed = true
        }
        return applied
    }

    public func close() { socket.close() }
}
