/// Decides, for each sequence number a reader sees, whether to apply it, skip it, or take a new
/// snapshot. This is the reader's half of the Clone pattern, free of IO.
public struct SequenceTracker: Sendable, Equatable {
    public enum Decision: Sendable, Equatable {
        /// The next message in order: apply it.
        case apply
        /// Already covered by the snapshot or an earlier message: drop it.
        case skip
        /// Messages were missed, or the owner went back: take a snapshot, then go on from it.
        case resync(expected: UInt64, got: UInt64)
    }

    /// The sequence the reader's state is at; nil before the first snapshot.
    public private(set) var position: UInt64?

    public init(position: UInt64? = nil) {
        self.position = position
    }

    /// After a snapshot taken at `sequence`.
    public mutating func reset(to sequence: UInt64) {
        position = sequence
    }

    public mutating func observe(_ sequence: UInt64, heartbeat: Bool = false) -> Decision {
        guard let position else { return .resync(expected: 1, got: sequence) }
        if heartbeat {
            // A heartbeat carries the owner's latest sequence: ahead means we missed the tail,
            // behind means the owner lost its history.
            return sequence == position ? .skip : .resync(expected: position, got: sequence)
        }
        if sequence <= position { return .skip }
        if sequence == position + 1 {
            self.position = sequence
            return .apply
        }
        return .resync(expected: position + 1, got: sequence)
    }
}
