import DispatchCore
import Foundation
import HubProtocol
import Postgres
import Push
import Storage
import StoreEngines

/// The dispatcher's store on PostgreSQL, which several dispatchers can share, each serving the
/// shards it holds leases on. Its tables live in the schema `dispatch`, named in full in every
/// statement. The dispatcher keeps its turns in memory until their group is due and writes them
/// as one (`CommitStrategy.gatheredTurns`), so no transaction stays open between writes, and a delivery
/// acknowledged in the same group is never written. Each write commits without waiting for the
/// server's disk (synchronous_commit off, set in the connection's options so that a reconnected
/// session has it too): like the SQLite store, it may lose its last group, which the publish
/// service's log rebuilds.
final class PostgresDeliveryStore: DeliveryEngine, PostgresBacked {
    static let schema = "dispatch"

    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE SCHEMA IF NOT EXISTS dispatch;
            CREATE TABLE dispatch.cursor (id INTEGER PRIMARY KEY CHECK (id = 1), after BIGINT NOT NULL);
            INSERT INTO dispatch.cursor (id, after) VALUES (1, 0);
            CREATE TABLE dispatch.shard_cursors (shard INTEGER PRIMARY KEY, after BIGINT NOT NULL);
            INSERT INTO dispatch.shard_cursors (shard, after) SELECT shard, 0 FROM generate_series(0, \(Shards.count - 1)) AS shard;
            CREATE TABLE dispatch.outcomes (
                notification_id TEXT PRIMARY KEY,
                state TEXT NOT NULL,
                enqueued_at DOUBLE PRECISION NOT NULL,
                started_at DOUBLE PRECISION,
                ended_at DOUBLE PRECISION,
                targets BIGINT NOT NULL DEFAULT 0,
                delivered BIGINT NOT NULL DEFAULT 0,
                acknowledged BIGINT NOT NULL DEFAULT 0,
                expired BIGINT NOT NULL DEFAULT 0,
                failed BIGINT NOT NULL DEFAULT 0
            );
            CREATE TABLE dispatch.payloads (
                id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                notification_id TEXT NOT NULL,
                body TEXT NOT NULL
            );
            CREATE TABLE dispatch.deliveries (
                seq BIGINT GENERATED ALWAYS AS IDENTITY,
                delivery_id TEXT PRIMARY KEY,
                notification_id TEXT NOT NULL,
                installation_id TEXT NOT NULL,
                shard INTEGER NOT NULL,
                template TEXT,
                payload_id BIGINT,
                rich BYTEA,
                expires_at DOUBLE PRECISION NOT NULL,
                delivered_at DOUBLE PRECISION,
                acked_at DOUBLE PRECISION,
                failed_reason TEXT,
                platform TEXT,
                push_channel TEXT,
                headers TEXT
            );
            CREATE INDEX deliveries_pending ON dispatch.deliveries(installation_id, seq) WHERE acked_at IS NULL;
            CREATE INDEX deliveries_by_expiry ON dispatch.deliveries(expires_at) WHERE acked_at IS NULL;
            CREATE INDEX deliveries_by_shard ON dispatch.deliveries(shard, seq) WHERE acked_at IS NULL;
            CREATE INDEX deliveries_push ON dispatch.deliveries(seq) WHERE platform IS NOT NULL AND acked_at IS NULL;
            CREATE TABLE dispatch.platform_outcomes (
                notification_id TEXT NOT NULL,
                platform TEXT NOT NULL,
                outcome TEXT NOT NULL,
                count BIGINT NOT NULL,
                PRIMARY KEY (notification_id, platform, outcome)
            );
            CREATE TABLE dispatch.test_results (
                delivery_id TEXT PRIMARY KEY,
                notification_id TEXT NOT NULL,
                installation_id TEXT NOT NULL,
                platform TEXT NOT NULL,
                push_channel TEXT NOT NULL,
                outcome TEXT,
                success BOOLEAN NOT NULL DEFAULT false
            );
            CREATE INDEX test_results_by_notification ON dispatch.test_results(notification_id);
            CREATE TABLE dispatch.leases (
                shard INTEGER PRIMARY KEY,
                owner TEXT,
                endpoint TEXT,
                expires_at DOUBLE PRECISION NOT NULL DEFAULT 0
            );
            INSERT INTO dispatch.leases (shard) SELECT shard FROM dispatch.shard_cursors;
            CREATE TABLE dispatch.dispatchers (id TEXT PRIMARY KEY, endpoint TEXT NOT NULL, seen_at DOUBLE PRECISION NOT NULL);
            """),
        // Each lease's fencing token: moved on by every claim, checked by every write.
        Migration(version: 2, "ALTER TABLE dispatch.leases ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;"),
        // A topic (RFC 8030 §5.4): a newer delivery with the same one replaces an open one not yet sent.
        Migration(
            version: 3,
            """
            ALTER TABLE dispatch.deliveries ADD COLUMN topic TEXT;
            CREATE INDEX deliveries_by_topic ON dispatch.deliveries(installation_id, topic) WHERE topic IS NOT NULL AND acked_at IS NULL;
            """),
        // The hub a notification was sent to (NULL: the default hub), whose Send keys may read its outcome.
        Migration(version: 4, "ALTER TABLE dispatch.outcomes ADD COLUMN hub TEXT;"),
        // Broadcasts stored once for the agents away, and where each agent is (`DeliveryEngine+Parked`).
        Migration(
            version: 5,
            """
            CREATE TABLE dispatch.broadcasts (
                notification_id TEXT PRIMARY KEY,
                sequence BIGINT NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                body TEXT NOT NULL
            );
            CREATE TABLE dispatch.broadcast_shards (
                notification_id TEXT NOT NULL,
                shard INTEGER NOT NULL,
                registry_at BIGINT NOT NULL,
                parked BIGINT NOT NULL,
                caught_up BIGINT NOT NULL DEFAULT 0,
                expires_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (notification_id, shard)
            );
            CREATE TABLE dispatch.agent_positions (
                installation_id TEXT PRIMARY KEY,
                shard INTEGER NOT NULL,
                after BIGINT NOT NULL,
                here BOOLEAN NOT NULL
            );
            CREATE INDEX agent_positions_here ON dispatch.agent_positions(shard) WHERE here;
            """),
    ]

    /// Lists of shards are int[] literals. Each read of a few shards is a statement of its own, so
    /// that its plan uses deliveries_by_shard.
    static let sql = DeliverySQL(
        cursor: "SELECT after FROM dispatch.cursor WHERE id = 1",
        shardCursors: "SELECT s.shard, greatest(s.after, c.after) AS after FROM dispatch.shard_cursors s, dispatch.cursor c WHERE c.id = 1",
        advanceCursor: "UPDATE dispatch.cursor SET after = $1 WHERE id = 1 AND after < $1",
        advanceShardCursors: "UPDATE dispatch.shard_cursors SET after = $1 WHERE shard = ANY($2::int[]) AND after < $1",
        insertPayload: "INSERT INTO dispatch.payloads (notification_id, body) VALUES ($1, $2) RETURNING id",
        insertDelivery: """
            INSERT INTO dispatch.deliveries
              (delivery_id, notification_id, installation_id, shard, template, payload_id, expires_at, rich, delivered_at,
               acked_at, failed_reason, platform, push_channel, headers)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
            ON CONFLICT (delivery_id) DO NOTHING
            """,
        insertAgentDeliveries: DeliverySQL.remembered { rows in
            """
            INSERT INTO dispatch.deliveries
              (delivery_id, notification_id, installation_id, shard, template, payload_id, expires_at, rich, delivered_at)
            VALUES \(DeliverySQL.values(rows: rows, width: 9) { "(" + ($0..<$0 + 9).map { "$\($0)" }.joined(separator: ", ") + ")" })
            ON CONFLICT (delivery_id) DO NOTHING
            """
        },
        insertTestResult: """
            INSERT INTO dispatch.test_results (delivery_id, notification_id, installation_id, platform, push_channel, outcome)
            VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (delivery_id) DO NOTHING
            """,
        replaceTopic: """
            UPDATE dispatch.deliveries SET expires_at = $1
            WHERE installation_id = $2 AND topic = $3 AND acked_at IS NULL AND delivered_at IS NULL
              AND delivery_id <> $4 AND expires_at > $1
            """,
        setTopic: "UPDATE dispatch.deliveries SET topic = $1 WHERE delivery_id = $2",
        markDelivered: "UPDATE dispatch.deliveries SET delivered_at = $1 WHERE delivery_id = $2 AND delivered_at IS NULL",
        removeDelivery: """
            DELETE FROM dispatch.deliveries WHERE delivery_id = $1 AND installation_id = $2 AND acked_at IS NULL
            RETURNING notification_id
            """,
        closeDelivery: """
            UPDATE dispatch.deliveries SET acked_at = $1, failed_reason = $2
            WHERE delivery_id = $3 AND installation_id = $4 AND acked_at IS NULL
            RETURNING notification_id
            """,
        // One statement: a delivery another dispatcher removes meanwhile is not counted twice.
        removeExpired: """
            DELETE FROM dispatch.deliveries WHERE acked_at IS NULL AND expires_at <= $1
            RETURNING delivery_id, notification_id, platform
            """,
        removeExpiredOfShards: """
            DELETE FROM dispatch.deliveries WHERE acked_at IS NULL AND expires_at <= $1 AND shard = ANY($2::int[])
            RETURNING delivery_id, notification_id, platform
            """,
        setTestOutcome: "UPDATE dispatch.test_results SET outcome = $1, success = $2 WHERE delivery_id = $3 AND outcome IS NULL",
        openOutcomes: DeliverySQL.remembered { rows in
            """
            INSERT INTO dispatch.outcomes (notification_id, state, enqueued_at, started_at, ended_at, targets, expired, hub)
            VALUES \(DeliverySQL.outcomeValues(rows: rows, marker: "$")) ON CONFLICT (notification_id) DO NOTHING
            """
        },
        openOutcomesAdding: DeliverySQL.remembered { rows in
            """
            INSERT INTO dispatch.outcomes AS o (notification_id, state, enqueued_at, started_at, ended_at, targets, expired, hub)
            VALUES \(DeliverySQL.outcomeValues(rows: rows, marker: "$"))
            ON CONFLICT (notification_id) DO UPDATE SET
              targets = o.targets + excluded.targets,
              expired = CASE WHEN o.state = 'Abandoned' AND excluded.state = 'Abandoned' THEN o.expired ELSE o.expired + excluded.expired END,
              state = CASE WHEN 'Completed' IN (o.state, excluded.state) THEN 'Completed'
                           WHEN 'Abandoned' IN (o.state, excluded.state) THEN 'Abandoned' ELSE excluded.state END,
              started_at = least(o.started_at, excluded.started_at), ended_at = greatest(o.ended_at, excluded.ended_at)
            """
        },
        addToOutcome: """
            UPDATE dispatch.outcomes SET delivered = delivered + $1, acknowledged = acknowledged + $2, expired = expired + $3,
              failed = failed + $4
            WHERE notification_id = $5
            """,
        platformCount: """
            INSERT INTO dispatch.platform_outcomes (notification_id, platform, outcome, count) VALUES ($1, $2, $3, $4)
            ON CONFLICT (notification_id, platform, outcome) DO NOTHING
            """,
        platformCountAdding: """
            INSERT INTO dispatch.platform_outcomes AS p (notification_id, platform, outcome, count) VALUES ($1, $2, $3, $4)
            ON CONFLICT (notification_id, platform, outcome) DO UPDATE SET count = p.count + excluded.count
            """,
        testNotifications: "SELECT DISTINCT notification_id FROM dispatch.test_results",
        // Ids compare byte by byte, as SQLite compares them, whatever the database's collation.
        testResults: """
            SELECT installation_id, platform, push_channel, outcome, success FROM dispatch.test_results
            WHERE notification_id = $1 ORDER BY delivery_id COLLATE "C"
            """,
        backlog: "SELECT DISTINCT installation_id FROM dispatch.deliveries WHERE acked_at IS NULL AND expires_at > $1 AND platform IS NULL",
        backlogOfShards: """
            SELECT DISTINCT installation_id FROM dispatch.deliveries
            WHERE acked_at IS NULL AND expires_at > $1 AND platform IS NULL AND shard = ANY($2::int[])
            """,
        pending: """
            SELECT d.delivery_id, d.notification_id, d.template, coalesce(p.body, '') AS body, d.expires_at, d.rich,
                   CASE WHEN d.delivered_at IS NULL THEN 0 ELSE 1 END AS sent
            FROM dispatch.deliveries d LEFT JOIN dispatch.payloads p ON p.id = d.payload_id
            WHERE d.installation_id = $1 AND d.acked_at IS NULL AND d.expires_at > $2
            ORDER BY d.seq LIMIT $3
            """,
        pendingPush: """
            SELECT d.delivery_id, d.notification_id, d.installation_id, d.platform, d.push_channel, coalesce(p.body, '') AS body, d.headers, d.expires_at
            FROM dispatch.deliveries d LEFT JOIN dispatch.payloads p ON p.id = d.payload_id
            WHERE d.platform IS NOT NULL AND d.acked_at IS NULL AND d.expires_at > $1
            ORDER BY d.seq LIMIT $2
            """,
        pendingPushOfShards: """
            SELECT d.delivery_id, d.notification_id, d.installation_id, d.platform, d.push_channel, coalesce(p.body, '') AS body, d.headers, d.expires_at
            FROM dispatch.deliveries d LEFT JOIN dispatch.payloads p ON p.id = d.payload_id
            WHERE d.platform IS NOT NULL AND d.acked_at IS NULL AND d.expires_at > $1 AND d.shard = ANY($3::int[])
            ORDER BY d.seq LIMIT $2
            """,
        outcome: """
            SELECT state, enqueued_at, started_at, ended_at, targets, delivered, acknowledged, expired, failed, hub
            FROM dispatch.outcomes WHERE notification_id = $1
            """,
        platformOutcomes: "SELECT platform, outcome, count FROM dispatch.platform_outcomes WHERE notification_id = $1",
        waitingPush: """
            SELECT count(*) AS n FROM dispatch.deliveries
            WHERE notification_id = $1 AND platform IS NOT NULL AND acked_at IS NULL AND expires_at > $2
            """,
        openDeliveries: "SELECT count(*) AS n FROM dispatch.deliveries WHERE acked_at IS NULL",
        outcomeTotals: """
            SELECT count(*) AS notifications, coalesce(sum(targets),0) AS targets, coalesce(sum(delivered),0) AS delivered,
                   coalesce(sum(acknowledged),0) AS acknowledged, coalesce(sum(expired),0) AS expired, coalesce(sum(failed),0) AS failed
            FROM dispatch.outcomes
            """,
        purge: [
            // A purge reads every delivery: it may take longer than the session's statement limit.
            ("SELECT set_config('statement_timeout', '0', true)", nil),
            ("DELETE FROM dispatch.deliveries WHERE acked_at IS NOT NULL AND acked_at < $1", 86_400),
            ("""
             DELETE FROM dispatch.outcomes o WHERE ended_at < $1
               AND NOT EXISTS (SELECT 1 FROM dispatch.deliveries d WHERE d.notification_id = o.notification_id)
             """, 7 * 86_400),
            ("""
             DELETE FROM dispatch.payloads p
             WHERE NOT EXISTS (SELECT 1 FROM dispatch.deliveries d WHERE d.notification_id = p.notification_id)
             """, nil),
            ("""
             DELETE FROM dispatch.platform_outcomes t
             WHERE NOT EXISTS (SELECT 1 FROM dispatch.outcomes o WHERE o.notification_id = t.notification_id)
             """, nil),
            ("""
             DELETE FROM dispatch.test_results t
             WHERE NOT EXISTS (SELECT 1 FROM dispatch.outcomes o WHERE o.notification_id = t.notification_id)
             """, nil),
            ("DELETE FROM dispatch.dispatchers WHERE seen_at < $1", 86_400),
        ],
        heartbeat: """
            INSERT INTO dispatch.dispatchers (id, endpoint, seen_at) VALUES ($1, $2, $3)
            ON CONFLICT (id) DO UPDATE SET endpoint = excluded.endpoint, seen_at = excluded.seen_at
            """,
        liveDispatchers: "SELECT count(*) AS n FROM dispatch.dispatchers WHERE seen_at > $1",
        renewLeases: "UPDATE dispatch.leases SET expires_at = $1 WHERE owner = $2 RETURNING shard, epoch",
        // Rows another claimer has locked are skipped, not waited for; one it has just taken no
        // longer matches once its claim commits.
        claimLeases: """
            UPDATE dispatch.leases SET owner = $1, endpoint = $2, expires_at = $3, epoch = epoch + 1
            WHERE shard IN (
                SELECT shard FROM dispatch.leases WHERE owner IS NULL OR expires_at <= $4
                ORDER BY shard LIMIT $5 FOR UPDATE SKIP LOCKED)
            RETURNING shard, epoch
            """,
        // FOR SHARE: a claim waits for (or skips) a lease row a write has checked, until that write ends.
        fenceCheck: """
            SELECT shard FROM dispatch.leases WHERE owner = $1 AND (shard::text || ':' || epoch::text) = ANY($2::text[]) FOR SHARE
            """,
        releaseLeases: "UPDATE dispatch.leases SET owner = NULL, endpoint = NULL, expires_at = 0 WHERE owner = $1 AND shard = ANY($2::int[])",
        leaseOwners: "SELECT shard, endpoint FROM dispatch.leases WHERE owner IS NOT NULL AND expires_at > $1",
        insertBroadcast: """
            INSERT INTO dispatch.broadcasts (notification_id, sequence, expires_at, body) VALUES ($1, $2, $3, $4)
            ON CONFLICT (notification_id) DO NOTHING
            """,
        insertBroadcastShard: """
            INSERT INTO dispatch.broadcast_shards (notification_id, shard, registry_at, parked, expires_at) VALUES ($1, $2, $3, $4, $5)
            ON CONFLICT (notification_id, shard) DO NOTHING
            """,
        parkedBroadcasts: """
            SELECT s.notification_id, s.shard, s.registry_at, b.body
            FROM dispatch.broadcast_shards s JOIN dispatch.broadcasts b USING (notification_id)
            WHERE s.expires_at > $1 AND s.shard = ANY($2::int[]) ORDER BY b.sequence, s.shard
            """,
        addCaughtUp: "UPDATE dispatch.broadcast_shards SET caught_up = caught_up + $1 WHERE notification_id = $2 AND shard = $3",
        expireBroadcasts: """
            DELETE FROM dispatch.broadcast_shards WHERE expires_at <= $1 AND shard = ANY($2::int[])
            RETURNING notification_id, shard, parked, caught_up
            """,
        dropBroadcasts: """
            DELETE FROM dispatch.broadcasts b WHERE b.expires_at <= $1
              AND NOT EXISTS (SELECT 1 FROM dispatch.broadcast_shards s WHERE s.notification_id = b.notification_id)
            """,
        position: "SELECT after, here FROM dispatch.agent_positions WHERE installation_id = $1",
        setPosition: """
            INSERT INTO dispatch.agent_positions (installation_id, shard, after, here) VALUES ($1, $2, $3, $4)
            ON CONFLICT (installation_id) DO UPDATE SET after = excluded.after, here = excluded.here
            """,
        closePositions: "UPDATE dispatch.agent_positions SET here = false, after = $1 WHERE here AND shard = $2",
        insertOwed: """
            WITH p AS (INSERT INTO dispatch.payloads (notification_id, body) VALUES ($2, $6) RETURNING id)
            INSERT INTO dispatch.deliveries (delivery_id, notification_id, installation_id, shard, template, payload_id, expires_at, rich)
            SELECT $1, $2, $3, $4, $5, p.id, $7, $8 FROM p ON CONFLICT (delivery_id) DO NOTHING
            """,
        shards: { "{" + $0.sorted().map(String.init).joined(separator: ",") + "}" },
        fencedShards: { "{" + $0.joined(separator: ",") + "}" })

    let url: String
    let connection: PostgresConnection
    let ledger = DeliveryLedger()

    /// How long a dispatcher's session may wait, so that a peer paused inside a transaction
    /// cannot stall it past its leases: a lock is waited for at most `lockTimeoutMs` (the turn
    /// then fails and is written again later); a statement runs at most `statementTimeoutMs`; and a
    /// session left idle inside a transaction (its process paused or hung) is ended by the server
    /// after `idleInTransactionMs`, which rolls it back and frees its locks. Set per session, in
    /// the connection's options, so no server setting is needed. `dispatcher` names the session's
    /// dispatcher (the setting nh.dispatcher, and application_name), for the server's views.
    struct SessionLimits: Equatable {
        var lockTimeoutMs = 1_000
        var statementTimeoutMs = 30_000
        var idleInTransactionMs = 2_000
        var dispatcher: String?

        /// Limits for dispatchers whose leases last `leasePeriod`: a lock waits a sixth of it, an
        /// idle transaction lives a third of it, so a survivor renews in time and takes a paused
        /// peer's shards within a lease and a beat.
        init(leasePeriod: TimeInterval, dispatcher: String?) {
            lockTimeoutMs = max(100, Int(leasePeriod * 1_000 / 6))
            idleInTransactionMs = max(500, Int(leasePeriod * 1_000 / 3))
            statementTimeoutMs = max(30_000, Int(leasePeriod * 10_000))
            self.dispatcher = dispatcher
        }

        init() {}

        var settings: [(String, String)] {
            var settings = [
                ("synchronous_commit", "off"), ("lock_timeout", "\(lockTimeoutMs)"), ("statement_timeout", "\(statementTimeoutMs)"),
                ("idle_in_transaction_session_timeout", "\(idleInTransactionMs)"),
            ]
            if let dispatcher { settings.append(("nh.dispatcher", dispatcher)) }
            return settings
        }
    }

    /// Connects, makes the schema when it is missing, and brings it to the code's version.
    init(url: String, limits: SessionLimits = SessionLimits()) throws {
        self.url = url
        connection = try PostgresConnection(url: Self.withSettings(url, limits.settings, applicationName: limits.dispatcher.map { _ in "nh-dispatch" }))
        try connection.migrate(Self.migrations, name: Self.schema)
        // The cursors are numbers of the publish store's history, kept in the same database: what
        // this store holds after a failover is never past what the publish store holds.
        try connection.followHistory { _ in }
        ledger.testNotifications = try testNotificationIds()
    }

    /// The replication as the other services see it: this session's own commits do not wait for a
    /// standby (synchronous_commit off), so whether theirs do is not this session's to say.
    func replicationDetails() -> [String: String] {
        connection.replicationDetails {
            $0["storeSynchronous"] = "see the other services (this service's own commits wait for no standby)"
            $0["storeRisk"] = nil
        }
    }

    func checkSession() throws {
        if connection.hasSessionEvents { throw StoreSessionChanged() }
    }

    /// `url` with the session's settings added to its options (which a reconnect sends again).
    static func withSettings(
        _ url: String, _ settings: [(String, String)] = [("synchronous_commit", "off")], applicationName: String? = nil
    ) -> String {
        // Inside options a space separates, and a backslash escapes one; in the URL each is encoded.
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._")
        func encoded(_ text: String) -> String {
            text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: " ", with: "\\ ")
                .addingPercentEncoding(withAllowedCharacters: allowed) ?? text
        }
        let setting = settings.map { "-c%20" + encoded($0.0) + "%3D" + encoded($0.1) }.joined(separator: "%20")
        // The query is read by hand: URLComponents refuses a URL that names several hosts
        // (postgresql://u@h1:5432,h2:5432/nh), as one that follows a failover does.
        let split = url.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var items = split.count > 1 ? split[1].split(separator: "&").map(String.init) : []
        if let index = items.firstIndex(where: { $0.hasPrefix("options=") }) {
            items[index] += "%20" + setting
        } else {
            items.append("options=" + setting)
        }
        if let applicationName, !items.contains(where: { $0.hasPrefix("application_name=") }) {
            items.append("application_name=" + encoded(applicationName))
        }
        return String(split[0]) + "?" + items.joined(separator: "&")
    }

    func writeTurn(_ body: () throws -> Void) throws { try write(body) }

    /// Each write has committed already.
    func flush() throws {}

    /// The dispatcher writes a group of turns as one; each statement is a round trip to the server,
    /// so a broadcast's deliveries go in, and a turn's acknowledgements come out, a few thousand
    /// rows to a statement.
    var commits: CommitStrategy { .gatheredTurns }

    /// Agents' deliveries recorded in a write are held until its end, so that those acknowledged
    /// in the same write (the same group of turns) are never written.
    var groupOpen: Bool { ledger.open != nil }

    func insertAgentDeliveries(_ rows: ArraySlice<(String, UnwrittenDeliveries.Delivery)>) throws -> Set<String> {
        guard let notificationId = rows.first?.1.notificationId else { return [] }
        let inserted = try connection.query(Self.insertAgentDeliveryArrays, [
            notificationId, PostgresValue.textArray(rows.map(\.0)), PostgresValue.textArray(rows.map(\.1.installationId)),
            PostgresValue.textArray(rows.map { String($0.1.shard) }), PostgresValue.textArray(rows.map(\.1.template)),
            PostgresValue.textArray(rows.map { String($0.1.payloadId) }),
            PostgresValue.textArray(rows.map { String($0.1.expiresAt.timeIntervalSince1970) }), PostgresValue.byteaArray(rows.map(\.1.rich)),
            PostgresValue.textArray(rows.map { $0.1.deliveredAt.map { String($0.timeIntervalSince1970) } }),
        ])
        return Set(try inserted.map { try $0.string("delivery_id", of: "deliveries") })
    }

    func removeDeliveries(_ pairs: ArraySlice<(String, String)>) throws -> [(String, String)] {
        try connection.query(Self.removeDeliveryArrays, [PostgresValue.textArray(pairs.map(\.0)), PostgresValue.textArray(pairs.map(\.1))])
            .map { (try $0.string("delivery_id", of: "deliveries"), try $0.string("notification_id", of: "deliveries")) }
    }

    /// (notification id, then arrays of: delivery ids, installation ids, shards, templates, payload
    /// ids, expiries, rich references, delivered at) → the delivery ids inserted, those not stored before.
    static let insertAgentDeliveryArrays = """
        INSERT INTO dispatch.deliveries
          (delivery_id, notification_id, installation_id, shard, template, payload_id, expires_at, rich, delivered_at)
        SELECT given.id, $1::text, given.installation, given.shard, given.template, given.payload, given.expires, given.rich, given.delivered
        FROM unnest($2::text[], $3::text[], $4::int[], $5::text[], $6::bigint[], $7::float8[], $8::bytea[], $9::float8[])
          AS given(id, installation, shard, template, payload, expires, rich, delivered)
        ON CONFLICT (delivery_id) DO NOTHING
        RETURNING delivery_id
        """

    /// (delivery ids, installation ids) → (delivery id, notification id) of each removed: only a
    /// delivery still open, and only for the installation it was meant for.
    static let removeDeliveryArrays = """
        DELETE FROM dispatch.deliveries AS d USING unnest($1::text[], $2::text[]) AS ack(id, installation)
        WHERE d.delivery_id = ack.id AND d.installation_id = ack.installation AND d.acked_at IS NULL
        RETURNING d.delivery_id, d.notification_id
        """

    func close() { connection.close() }

    var engine: PostgresEngine { PostgresEngine(connection) }
}
