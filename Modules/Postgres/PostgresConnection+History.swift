import Foundation
import HubProtocol
import Storage

/// The store's history on PostgreSQL (see `StoreHistory`), in the schema `store_history` (not named
/// after a role, so that a role's own schema never shadows nh_migrations): `histories` has a row an
/// epoch, with the timeline each began on, and a session whose server is on another timeline than
/// the newest row's (a replica was promoted, or the cluster was restored to a point in time) begins
/// the next epoch. Every writer learns the history at the start of each session, before its first
/// statement, so nothing is numbered in a history before it has begun. `marks` says where each
/// counter stood when it moved into an epoch: the last number that history shares with the ones
/// before it.
extension PostgresConnection {
    /// The advisory lock a history begins under, so that the processes reaching a promoted server at
    /// once begin one history, not one each.
    static let historyLock: Int64 = 0x6E68_5F68_6973_74

    /// Follows the server's history: learns it now and at the start of every later session, before
    /// anything else runs in it, and then runs `onSession` (where a store moves its counters into
    /// the history). A session that does not come up is set up at its first statement.
    public func followHistory(onSession: @escaping (StoreHistory) throws -> Void) throws {
        self.onSession = onSession
        sessionReady = false
        try prepareSession()
    }

    /// Follows the server's history for a store numbered by one counter (the row of `table`, also
    /// its name among the marks): each session moves it into the history before it writes (`enter`).
    public func followHistory(counter table: String) throws {
        try followHistory { [unowned self] in try enter($0, counter: table) }
    }

    /// What the sessions set up since the last call found: a renewed session, or a history that
    /// changed; the caller acts on them in order.
    public func takeSessionEvents() -> [StoreSessionEvent] {
        defer { sessionEvents.removeAll() }
        return sessionEvents
    }

    /// Whether sessions were set up that the store has not taken the events of yet.
    public var hasSessionEvents: Bool { !sessionEvents.isEmpty }

    /// Learns this session's history and runs `onSession`; the session is ready only once both did.
    func prepareSession() throws(PostgresError) {
        preparingSession = true
        defer { preparingSession = false }
        let current: StoreHistory
        do {
            current = try establishHistory()
            try onSession?(current)
        } catch let error as PostgresError {
            throw error
        } catch {
            throw PostgresError(message: "\(error)", operation: "set up a session on \(target)")
        }
        if let previous = history {
            sessionEvents.append(previous.id == current.id ? .renewed(current) : .rewound(from: previous, to: current))
        }
        history = current
        sessionReady = true
    }

    /// The server's timeline, refusing a standby: a store writes only on the primary.
    private func timeline() throws(PostgresError) -> UInt64 {
        let (inRecovery, timeline) = try queryRow(
            "SELECT pg_is_in_recovery() AS in_recovery, CASE WHEN pg_is_in_recovery() THEN 0 ELSE \(Self.timelineSQL) END AS timeline"
        ) { row throws(HubError) in
            (try row.bool("in_recovery", of: "pg_is_in_recovery"), try row.int64("timeline", of: "pg_current_wal_lsn"))
        }
        if inRecovery {
            throw PostgresError(
                sqlState: "25006",
                message: "the server is a standby (in recovery); the hub's store must be the primary: give every host in the URL and target_session_attrs=read-write",
                operation: "learn the store's history on \(target)")
        }
        return UInt64(timeline)
    }

    /// The server's timeline, as an expression: the first eight hex digits of the current WAL file's name.
    static let timelineSQL = "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint"

    /// The history this session's server is on, beginning the next one when its timeline is new.
    func establishHistory() throws(PostgresError) -> StoreHistory {
        let timeline = try timeline()
        if try exists("store_history.histories"), let known = try history(try queryOne(Self.latestHistory)), known.timeline == timeline
        {
            return known
        }
        // The lock is the session's, taken before the transaction: a transaction that waited for
        // it inside would check the catalog as it was before the last holder made the schema.
        try run("SELECT pg_advisory_lock($1)", [Self.historyLock])
        // Fails only with the session gone, which frees the lock with it.
        defer { _ = try? run("SELECT pg_advisory_unlock($1)", [Self.historyLock]) }
        do {
            return try transaction {
                // Made once, by the first session that finds them missing: a role that may not create
                // schemas still begins a history on tables made before.
                guard try !exists("store_history.marks") else { return try begin(timeline: timeline) }
                try execute("""
                    CREATE SCHEMA IF NOT EXISTS store_history;
                    CREATE TABLE IF NOT EXISTS store_history.histories (
                        epoch BIGINT PRIMARY KEY, id TEXT NOT NULL, timeline BIGINT NOT NULL, began_at DOUBLE PRECISION NOT NULL);
                    CREATE TABLE IF NOT EXISTS store_history.marks (
                        counter TEXT NOT NULL, epoch BIGINT NOT NULL, previous BIGINT NOT NULL, PRIMARY KEY (counter, epoch));
                    """)
                return try begin(timeline: timeline)
            }
        } catch let error as PostgresError {
            throw error
        } catch {
            throw PostgresError(message: "\(error)", operation: "learn the store's history on \(target)")
        }
    }

    /// The history this session's server is on, beginning it in the open transaction when its
    /// timeline is new (`StoreHistory.epoch(after:timeline:)`).
    private func begin(timeline: UInt64) throws -> StoreHistory {
        // Another process may have begun it meanwhile, under the lock.
        let newest = try history(try queryOne(Self.latestHistory))
        if let newest, newest.timeline == timeline { return newest }
        // The time as the table keeps it, so that every process reads the same history.
        let begun = StoreHistory(
            epoch: StoreHistory.epoch(after: newest, timeline: timeline), id: UUID().uuidString.lowercased(), timeline: timeline,
            beganAt: Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded()))
        try run(
            "INSERT INTO store_history.histories (epoch, id, timeline, began_at) VALUES ($1, $2, $3, $4)",
            [Int64(begun.epoch), begun.id, Int64(begun.timeline), begun.beganAt])
        return begun
    }

    static let latestHistory = "SELECT epoch, id, timeline, began_at FROM store_history.histories ORDER BY epoch DESC LIMIT 1"

    private func history(_ row: PostgresRow?) throws(PostgresError) -> StoreHistory? {
        try row?.reading(Self.latestHistory) { row throws(HubError) in
            let table = "store_history.histories"
            return StoreHistory(
                epoch: try row.sequence("epoch", of: table), id: try row.string("id", of: table), timeline: try row.sequence("timeline", of: table),
                beganAt: try row.date("began_at", of: table))
        }
    }

    /// Moves the counter in `table` (a row with id 1 and a column `sequence`) into `history`: a
    /// counter still in an older epoch goes to the history's base, and where it stood is marked.
    /// Call it from `onSession`, before the session writes.
    public func enter(_ history: StoreHistory, counter table: String) throws {
        guard history.epoch > 0 else { return }
        try transaction {
            let sql = "SELECT sequence FROM \(table) WHERE id = 1 FOR UPDATE"
            guard let row = try queryOne(sql) else { return }
            let current = try row.reading(sql) { row throws(HubError) in try row.sequence("sequence", of: table) }
            guard current < history.base else { return }
            try run("UPDATE \(table) SET sequence = $1 WHERE id = 1", [Int64(history.base)])
            try mark(table, epoch: history.epoch, previous: current)
        }
    }

    /// Notes that `counter` stood at `previous` when it moved into `epoch`; the first note stands.
    public func mark(_ counter: String, epoch: UInt64, previous: UInt64) throws(PostgresError) {
        try run(
            "INSERT INTO store_history.marks (counter, epoch, previous) VALUES ($1, $2, $3) ON CONFLICT (counter, epoch) DO NOTHING",
            [counter, Int64(epoch), Int64(previous)])
    }

    /// Where `counter` stood when it first moved into an epoch after `epoch`; nil when it has not.
    public func nextMark(_ counter: String, after epoch: UInt64) throws(PostgresError) -> UInt64? {
        let sql = "SELECT previous FROM store_history.marks WHERE counter = $1 AND epoch > $2 ORDER BY epoch LIMIT 1"
        return try queryOne(sql, [counter, Int64(epoch)])?.reading(sql) { row throws(HubError) in
            try row.sequence("previous", of: "store_history.marks")
        }
    }

    /// What `position`, a number of `counter` (which stands at `latest` now), means in the current history.
    public func check(_ position: UInt64, of counter: String, latest: UInt64) throws(PostgresError) -> HistoryNumbering.Position {
        HistoryNumbering.check(
            position, latest: latest, nextMark: try nextMark(counter, after: HistoryNumbering.epoch(of: position)))
    }
}
