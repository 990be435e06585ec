import Foundation

/// One history of a store: the line of commits a server writes until it fails over to a replica
/// (PostgreSQL promotes it onto a new timeline). A replica promoted while behind continues an
/// older point of the history it followed, so what the old server had committed past that point is
/// gone, and a position a reader took there names something the new history does not hold.
///
/// Each history of a store has an epoch (0 for the first, one more at each failover) and an id of
/// its own, and numbers of an epoch are handed out from its base up (`HistoryNumbering`): a number
/// of a newer history is above every number an older one handed out, so a reader that asks for
/// what follows its position never skips what the new history holds, and the store can tell a
/// reader whose position the new history lost (`HistoryNumbering.check`). SQLite stores have one
/// history, epoch 0.
public struct StoreHistory: Sendable, Equatable, CustomStringConvertible {
    public var epoch: UInt64
    /// Random, made when the history began: two servers that each promoted themselves from the same
    /// point have the same epoch and different ids.
    public var id: String
    /// The PostgreSQL timeline the history began on.
    public var timeline: UInt64
    public var beganAt: Date

    public init(epoch: UInt64, id: String, timeline: UInt64, beganAt: Date) {
        self.epoch = epoch
        self.id = id
        self.timeline = timeline
        self.beganAt = beganAt
    }

    /// The first number of this history is above this one.
    public var base: UInt64 { HistoryNumbering.base(epoch: epoch) }

    /// The epoch a history begun on `timeline` takes after `newest`, the last one the server holds
    /// (nil: none, the first history). Along one line of promotions timelines only grow, so the
    /// epoch moves on by as many timelines as the server moved past `newest`: a standby promoted
    /// without having seen the histories of the timelines in between numbers above those too.
    public static func epoch(after newest: StoreHistory?, timeline: UInt64) -> UInt64 {
        guard let newest else { return 0 }
        return newest.epoch + (timeline > newest.timeline ? timeline - newest.timeline : 1)
    }

    public var description: String { "history \(epoch) (timeline \(timeline), id \(id))" }
}

/// How a store's numbers (sequences, cursors, versions) say which history they were handed out in.
/// The numbers of epoch E start above `base(E)` = E × 2^40: a trillion numbers an epoch, and eight
/// million epochs before a 63-bit number runs out. Epoch 0's base is 0, so a store that never failed
/// over numbers as it always did.
public enum HistoryNumbering {
    public static let epochBits: UInt64 = 40

    public static func base(epoch: UInt64) -> UInt64 { epoch << epochBits }

    /// The epoch a number was handed out in.
    public static func epoch(of number: UInt64) -> UInt64 { number >> epochBits }

    /// The next number of a counter that stands at `current`, in the history whose base is `base`:
    /// one more, or the first of the history when the counter is still in an older one.
    public static func next(after current: UInt64, base: UInt64) -> UInt64 { max(current, base) + 1 }

    /// What a reader's position means in the current history.
    public enum Position: Equatable, Sendable {
        /// The current history holds everything up to the position, as the reader saw it.
        case current
        /// The position is past what the current history holds of the reader's: everything after
        /// `shared` that the reader saw is gone, and what the history holds after `shared` is new.
        case rewound(shared: UInt64)
    }

    /// Whether `position`, a number a reader took from one counter, still names what it named.
    ///
    /// - `latest`: the counter's last number now.
    /// - `nextMark`: where the counter stood when it first moved into a history after the
    ///   position's epoch (nil when it has not moved since): the last number the current history
    ///   shares with the position's history.
    public static func check(_ position: UInt64, latest: UInt64, nextMark: UInt64?) -> Position {
        if let shared = nextMark { return position <= shared ? .current : .rewound(shared: shared) }
        return position <= latest ? .current : .rewound(shared: latest)
    }
}

/// What a store found when it opened a new session with its server, for the service to act on.
public enum StoreSessionEvent: Sendable, Equatable {
    /// A new session on the same history, after the old one was lost: what the server holds is
    /// what it had, but what this process keeps in memory about the store may be ahead of it (a
    /// commit that did not wait for the disk, lost to a crash), so positions are read again.
    case renewed(StoreHistory)
    /// The server is on another history than the last session's: it failed over.
    case rewound(from: StoreHistory, to: StoreHistory)

    public var history: StoreHistory {
        switch self {
        case .renewed(let history): history
        case .rewound(_, let history): history
        }
    }
}

/// A store that follows its server's history (one on PostgreSQL). SQLite stores have one history
/// and no replication, and do not conform.
public protocol StoreSessions: AnyObject {
    /// What the sessions set up since the last call found, in order.
    func takeSessionEvents() -> [StoreSessionEvent]
    /// The history the store's last session was on.
    var storeHistory: StoreHistory? { get }
    /// Health details of the store's server and its replication; a note of why when they cannot be read.
    func replicationDetails() -> [String: String]
    /// What `position`, a number of `counter` (which stands at `latest` now), means in the current history.
    func check(_ position: UInt64, of counter: String, latest: UInt64) throws -> HistoryNumbering.Position
}
