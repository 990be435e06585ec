import Foundation
import Storage

/// The store's replication as its primary sees it, for health: whether commits wait for a standby,
/// and how far each standby is behind. An asynchronous standby that is behind when the primary is
/// lost takes the commits it had not received with it; `risk` says so before it happens.
public struct PostgresReplication: Sendable, Equatable {
    public struct Standby: Sendable, Equatable {
        public var name: String
        /// streaming, catchup, startup…
        public var state: String
        /// async, potential, sync or quorum: only sync and quorum standbys make a commit wait.
        public var syncState: String
        /// WAL bytes the standby has not replayed yet; nil when the role may not see it.
        public var lagBytes: Int64?
        public var replayLagSeconds: Double?

        public init(name: String, state: String, syncState: String, lagBytes: Int64?, replayLagSeconds: Double?) {
            self.name = name
            self.state = state
            self.syncState = syncState
            self.lagBytes = lagBytes
            self.replayLagSeconds = replayLagSeconds
        }

        public var isSynchronous: Bool { syncState == "sync" || syncState == "quorum" }
        /// Whether the session's role may see the standby's state (it needs pg_monitor).
        public var isVisible: Bool { syncState != "unknown" }
    }

    public var timeline: UInt64
    /// The server's synchronous_standby_names; empty when commits wait for no standby.
    public var synchronousStandbyNames: String
    /// The server's synchronous_commit, as sessions start with it.
    public var synchronousCommit: String
    public var standbys: [Standby]

    public init(timeline: UInt64, synchronousStandbyNames: String, synchronousCommit: String, standbys: [Standby]) {
        self.timeline = timeline
        self.synchronousStandbyNames = synchronousStandbyNames
        self.synchronousCommit = synchronousCommit
        self.standbys = standbys
    }

    /// Whether an accepted send waits until a standby has it.
    public var commitsWaitForStandby: Bool {
        !synchronousStandbyNames.isEmpty && !["off", "local"].contains(synchronousCommit) && standbys.contains(where: \.isSynchronous)
    }

    /// What a failover may lose, in words, or nil when a synchronous standby holds every accepted send.
    public var risk: String? {
        if standbys.isEmpty { return "no standby: losing this server loses the store" }
        if !standbys.allSatisfy(\.isVisible) {
            return "cannot tell whether commits wait for a standby: grant pg_monitor to the hub's role to see the standbys"
        }
        if commitsWaitForStandby { return nil }
        if !synchronousStandbyNames.isEmpty {
            return "no synchronous standby is connected: commits wait until one is (synchronous_standby_names = '\(synchronousStandbyNames)')"
        }
        return "standbys are asynchronous: a failover loses what they had not received (see deploy/README.md, Store failover)"
    }

    /// Health details: words for people, numbers for /metrics.
    public var details: [String: String] {
        var details = [
            "storeRole": "primary", "storeTimeline": String(timeline),
            "storeSynchronous": synchronousStandbyNames.isEmpty ? "off" : "\(synchronousStandbyNames) (synchronous_commit \(synchronousCommit))",
            "storeStandbyCount": String(standbys.count), "storeSynchronousStandbys": String(standbys.filter(\.isSynchronous).count),
            "storeStandbys": standbys.isEmpty ? "none" : standbys.map { standby in
                var text = "\(standby.name) \(standby.state) \(standby.syncState)"
                if let bytes = standby.lagBytes { text += " lag \(bytes) B" }
                if let seconds = standby.replayLagSeconds { text += String(format: " %.3f s", seconds) }
                return text
            }.joined(separator: "; "),
        ]
        if let lag = standbys.compactMap(\.lagBytes).max() { details["storeStandbyLagBytesMax"] = String(lag) }
        if let risk { details["storeRisk"] = risk }
        return details
    }
}

extension PostgresConnection {
    /// The replication as the primary this session is on sees it. A role that may not read the
    /// standbys' state (it needs pg_monitor) sees that they are there, and no more.
    public func replication() throws(PostgresError) -> PostgresReplication {
        let settings = try queryOne("""
            SELECT \(Self.timelineSQL), current_setting('synchronous_standby_names'), current_setting('synchronous_commit')
            """)
        let standbys = try query("""
            SELECT coalesce(application_name, ''), coalesce(state, 'unknown'), coalesce(sync_state, 'unknown'),
                   pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint, extract(epoch FROM replay_lag)::float8
            FROM pg_stat_replication ORDER BY application_name
            """).map { row in
            PostgresReplication.Standby(
                name: row[0].string ?? "", state: row[1].string ?? "", syncState: row[2].string ?? "", lagBytes: row[3].int64,
                replayLagSeconds: row[4].double)
        }
        return PostgresReplication(
            timeline: UInt64(settings?[0].int64 ?? 0), synchronousStandbyNames: settings?[1].string ?? "",
            synchronousCommit: settings?[2].string ?? "", standbys: standbys)
    }

    /// Health details of the replication (`PostgresReplication.details`, changed by `adjust`), or
    /// a note of why they cannot be read. Asked between requests: a connection found broken is
    /// opened again first, so that health says where the store is now.
    public func replicationDetails(adjust: (inout [String: String]) -> Void = { _ in }) -> [String: String] {
        if !isInTransaction { _ = reconnectIfNeeded() }
        do {
            var details = try replication().details
            adjust(&details)
            return details
        } catch {
            return ["storeRole": "unknown", "storeError": error.message]
        }
    }
}
