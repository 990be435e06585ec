import Bus
import Foundation
import Storage

/// A store's change log published as a service's stream: in order, everything the log holds beyond
/// what the stream has published, whichever process sharing the store wrote it. Each service reads
/// its own log (`read`); publishing, paging and following other writers are here, once.
public final class ChangeLog<Change> {
    private let events: SequencedPublisher
    private let topic: String
    private let page: Int
    private let read: (_ after: UInt64, _ limit: Int) throws -> [Change]
    private let sequence: (Change) -> UInt64
    private let body: (Change) -> Data

    public init(
        _ events: SequencedPublisher, topic: String, page: Int = 1_000, read: @escaping (_ after: UInt64, _ limit: Int) throws -> [Change],
        sequence: @escaping (Change) -> UInt64, body: @escaping (Change) -> Data
    ) {
        self.events = events
        self.topic = topic
        self.page = page
        self.read = read
        self.sequence = sequence
        self.body = body
    }

    /// The last number published before the stream went into each later epoch of the store's history.
    private var lastBefore: [UInt64: UInt64] = [:]

    /// Publishes what the log holds beyond the stream, a page at a time.
    public func publish() throws {
        while true {
            let changes = try read(events.sequence, page)
            for change in changes where sequence(change) > events.sequence {
                let epoch = HistoryNumbering.epoch(of: sequence(change))
                if epoch > HistoryNumbering.epoch(of: events.sequence) { lastBefore[epoch] = events.sequence }
                try events.publish(topic: topic, sequence: sequence(change), body: body(change))
            }
            if changes.count < page { return }
        }
    }

    /// The store's history was rewound, and its log goes on from `latest`, above every number the
    /// stream published: the stream moves there and says so at once with a heartbeat, so that every
    /// reader reads again from the store (a snapshot, or a fetch), then publishes what follows.
    public func rewound(latest: UInt64) throws {
        events.advance(to: latest)
        try events.heartbeat()
        try publish()
    }

    /// The last sequence published before the stream reached `history`: what its readers had seen
    /// of the history before it, whatever was published since.
    public func published(before history: StoreHistory) -> UInt64 {
        events.sequence < history.base ? events.sequence : lastBefore[history.epoch] ?? events.sequence
    }

    /// Other processes write to the same store (on PostgreSQL): `notices` says, without waiting,
    /// whether they announced a change; it is polled every 50 ms, and the log is published whenever
    /// it says so, and every heartbeat in case a notice was missed (`beforeBeat` may refuse a beat,
    /// as while the store's server is away).
    public func follow(notices: @escaping () -> Bool, loop: EventLoop, heartbeatMs: Int, beforeBeat: @escaping () -> Bool = { true }) {
        loop.every(milliseconds: 50) { [unowned self] in if notices() { try self.publish() } }
        loop.every(milliseconds: heartbeatMs) { [unowned self] in
            guard beforeBeat() else { return }
            try self.publish()
        }
    }
}
