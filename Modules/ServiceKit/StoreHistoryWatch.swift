import Foundation
import Storage

/// A service's watch over its store's sessions (`StoreSessions`, a store on PostgreSQL): what a
/// service keeps in memory about its store (a change stream's sequence, a dispatcher's cursors) is
/// trusted across a lost connection only once the new session's history is known. A session on the
/// same history is `renewed`; one on another history (the server failed over) is `rewound`, which
/// is counted (`storeHistoryResetsTotal` in health and /metrics) and told in one error line, with
/// what the service lost and does again. A SQLite store has one history; the watch is then idle.
public final class StoreHistoryWatch {
    public private(set) var resets = 0
    let store: StoreSessions?
    let logger: Logger

    public init(_ store: Any, logger: Logger) {
        self.store = store as? StoreSessions
        self.logger = logger
    }

    /// Sessions taken from the store and not yet acted on: one whose action failed is tried again
    /// at the next look, with those after it.
    private var pending: [StoreSessionEvent] = []

    /// Acts on the sessions set up since the last look, in order: `renewed` for a new session on the
    /// same history, `rewound` for another history; each returns the fields of its log line (what
    /// was lost, what is done again). When one throws, it and those after it wait for the next look.
    public func check(
        renewed: (StoreHistory) throws -> [(String, CustomStringConvertible)] = { _ in [] },
        rewound: (_ from: StoreHistory, _ to: StoreHistory) throws -> [(String, CustomStringConvertible)]
    ) rethrows {
        guard let store else { return }
        pending += store.takeSessionEvents()
        while let event = pending.first {
            switch event {
            case .renewed(let history):
                let fields = try renewed(history)
                logger.log(.info, "store session renewed on the same history; positions read again from the store", [("history", history.epoch)] + fields)
            case .rewound(let from, let to):
                let fields = try rewound(from, to)
                resets += 1
                logger.log(
                    .error,
                    "the store's history was rewound: its server failed over, and what it had not passed on before is gone",
                    [("from", from.description), ("to", to.description)] + fields)
            }
            pending.removeFirst()
        }
    }

    /// For a service that publishes its store's change log (`log`, numbered by the store's counter
    /// `counter`, which stands at `latest()`): looked at every 100 ms on `loop`, a rewound history
    /// moves the stream on above the numbers lost (`ChangeLog.rewound`), and the error line names
    /// them (`lost`: what they numbered, and when) and what readers do now (`next`).
    public func keep<Change>(
        _ log: ChangeLog<Change>, counter: String, latest: @escaping () throws -> UInt64, loop: EventLoop, lost: String, next: String
    ) {
        loop.every(milliseconds: 100) { [unowned self] in
            try check { _, to in
                let published = log.published(before: to)
                let now = try latest()
                let gone = try self.lost(upTo: published, of: counter, latest: now)
                try log.rewound(latest: now)
                return [
                    ("lost", "\(lost.replacingOccurrences(of: "{}", with: Self.describe(gone)))"),
                    ("next", "numbers go on from \(to.base + 1); \(next)"),
                ]
            }
        }
    }

    /// The numbers of `counter` up to `position` that the store no longer holds (nil: none), where
    /// `latest` is where the counter stands now: after a rewind, what a reader had seen past the
    /// point the two histories share.
    public func lost(upTo position: UInt64, of counter: String, latest: UInt64) throws -> ClosedRange<UInt64>? {
        guard let store, case .rewound(let shared) = try store.check(position, of: counter, latest: latest) else { return nil }
        return shared + 1...position
    }

    /// `range` for a log line: "21…24", or "none".
    public static func describe(_ range: ClosedRange<UInt64>?) -> String {
        guard let range else { return "none" }
        return range.count == 1 ? String(range.lowerBound) : "\(range.lowerBound)…\(range.upperBound)"
    }

    /// Health details: the store's history and replication (its role, whether commits wait for a
    /// standby, and each standby's lag), and the resets seen; nothing for a SQLite store.
    public var details: [String: String] {
        guard let store else { return [:] }
        var details = store.replicationDetails()
        details["storeHistoryResetsTotal"] = String(resets)
        if let history = store.storeHistory {
            details["storeHistory"] = "epoch \(history.epoch) since \(ISO8601DateFormatter().string(from: history.beganAt))"
        }
        return details
    }
}
