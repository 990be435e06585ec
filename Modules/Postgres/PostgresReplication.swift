import Foundation
import HubProtocol
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
        let settings = try queryRow("""
            SELECT \(Self.timelineSQL) AS timeline, current_setting('synchronous_standby_names') AS synchronous_standby_names,
                   current_setting('synchronous_commit') AS synchronous_commit
            """) { row throws(HubError) in
            (timeline: try row.sequence("timeline", of: "pg_settings"), names: try row.string("synchronous_standby_names", of: "pg_settings"),
             commit: try row.string("synchronous_commit", of: "pg_settings"))
        }
        let sql = """
            SELECT coalesce(application_name, '') AS name, coalesce(state, 'unknown') AS state, coalesce(sync_state, 'unknown') AS sync_state,
                   pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint AS lag_bytes, extract(epoch FROM replay_lag)::float8 AS replay_lag
            FROM pg_stat_replication ORDER BY application_name
            """
        let table = "pg_stat_replication"
        let standbys = try query(sql).map { row throws(PostgresError) in
            try row.reading(sql) { row throws(HubError) in
                PostgresReplication.Standby(
                    name: try row.string("name", of: table), state: try row.string("state", of: table),
                    syncState: try row.string("sync_state", of: table), lagBytes: try row.optionalInt64("lag_bytes", of: table),
                    replayLagSeconds: try row.optionalDouble("replay_lag", of: table))
            }
        }
        return PostgresReplication(
            timeline: settings.timeline, synchronousStandbyNames: settings.names, synchronousCommit: settings.commit, standbys: standbys)
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
