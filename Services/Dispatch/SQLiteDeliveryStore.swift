import DispatchCore
import Foundation
import HubProtocol
import Postgres
import Push
import Storage
import StoreEngines

/// The dispatcher's store on SQLite, the embedded default. Turns write into a group of writes that
/// `flush` commits (every 50 ms to 2 s in the dispatcher, `GroupCommitPolicy`); deliveries to
/// agents wait in memory until then (`UnwrittenDeliveries`). The store may lose its last group to a
/// crash, since all of it can be rebuilt from the publish service's durable log.
final class SQLiteDeliveryStore: DeliveryEngine {
    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE TABLE cursor (id INTEGER PRIMARY KEY CHECK (id = 1), after INTEGER NOT NULL);
            INSERT INTO cursor (id, after) VALUES (1, 0);
            CREATE TABLE outcomes (
                notification_id TEXT PRIMARY KEY,
                state TEXT NOT NULL,
                enqueued_at REAL NOT NULL,
                started_at REAL,
                ended_at REAL,
                targets INTEGER NOT NULL DEFAULT 0,
                delivered INTEGER NOT NULL DEFAULT 0,
                acknowledged INTEGER NOT NULL DEFAULT 0,
                expired INTEGER NOT NULL DEFAULT 0,
                failed INTEGER NOT NULL DEFAULT 0
            );
            CREATE TABLE deliveries (
                delivery_id TEXT PRIMARY KEY,
                notification_id TEXT NOT NULL,
                installation_id TEXT NOT NULL,
                template TEXT,
                payload TEXT NOT NULL,
                expires_at REAL NOT NULL,
                delivered_at REAL,
                acked_at REAL
            );
            CREATE INDEX deliveries_pending ON deliveries(installation_id, acked_at);
            CREATE INDEX deliveries_by_expiry ON deliveries(expires_at) WHERE acked_at IS NULL;
            """),
        Migration(
            version: 2,
            """
            ALTER TABLE deliveries ADD COLUMN rich BLOB;
            ALTER TABLE deliveries ADD COLUMN failed_reason TEXT;
            """),
        // A broadcast's deliveries share their payload: stored once per notification and body.
        Migration(
            version: 3,
            """
            CREATE TABLE payloads (id INTEGER PRIMARY KEY, notification_id TEXT NOT NULL, body TEXT NOT NULL);
            ALTER TABLE deliveries ADD COLUMN payload_id INTEGER;
            """),
        // Outcomes per platform: each platform's targets, and what became of deliveries to a
        // platform without a delivery path.
        Migration(
            version: 4,
            """
            CREATE TABLE platform_outcomes (
                notification_id TEXT NOT NULL,
                platform TEXT NOT NULL,
                outcome TEXT NOT NULL,
                count INTEGER NOT NULL,
                PRIMARY KEY (notification_id, platform, outcome)
            );
            """),
        // What became of each of a test send's first targets.
        Migration(
            version: 5,
            """
            CREATE TABLE test_results (
                delivery_id TEXT PRIMARY KEY,
                notification_id TEXT NOT NULL,
                installation_id TEXT NOT NULL,
                platform TEXT NOT NULL,
                push_channel TEXT NOT NULL,
                outcome TEXT,
                success INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX test_results_by_notification ON test_results(notification_id);
            """),
        // Deliveries to phones and browsers go through their platform's push service: what it needs
        // to send them again after a restart. A Linux agent's delivery leaves these empty.
        Migration(
            version: 6,
            """
            ALTER TABLE deliveries ADD COLUMN platform TEXT;
            ALTER TABLE deliveries ADD COLUMN push_channel TEXT;
            ALTER TABLE deliveries ADD COLUMN headers TEXT;
            CREATE INDEX deliveries_push ON deliveries(platform) WHERE platform IS NOT NULL AND acked_at IS NULL;
            """),
        // Shards: each delivery's, a cursor per shard, leases on shards and the dispatchers that
        // hold them. Deliveries from before get their shard when the store opens (it takes the
        // hash of the installation id), found through deliveries_unsharded, which then goes.
        Migration(
            version: 7,
            """
            ALTER TABLE deliveries ADD COLUMN shard INTEGER;
            CREATE INDEX deliveries_by_shard ON deliveries(shard) WHERE acked_at IS NULL;
            CREATE INDEX deliveries_unsharded ON deliveries(installation_id) WHERE shard IS NULL;
            CREATE TABLE shard_cursors (shard INTEGER PRIMARY KEY, after INTEGER NOT NULL);
            WITH RECURSIVE n(shard) AS (SELECT 0 UNION ALL SELECT shard + 1 FROM n WHERE shard < \(Shards.count - 1))
            INSERT INTO shard_cursors (shard, after) SELECT shard, 0 FROM n;
            CREATE TABLE leases (shard INTEGER PRIMARY KEY, owner TEXT, endpoint TEXT, expires_at REAL NOT NULL DEFAULT 0);
            INSERT INTO leases (shard) SELECT shard FROM shard_cursors;
            CREATE TABLE dispatchers (id TEXT PRIMARY KEY, endpoint TEXT NOT NULL, seen_at REAL NOT NULL);
            """),
        // Each lease's fencing token: moved on by every claim, checked by every write.
        Migration(version: 8, "ALTER TABLE leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;"),
        // A topic (RFC 8030 §5.4): a newer delivery with the same one replaces an open one not yet sent.
        Migration(
            version: 9,
            """
            ALTER TABLE deliveries ADD COLUMN topic TEXT;
            CREATE INDEX deliveries_by_topic ON deliveries(installation_id, topic) WHERE topic IS NOT NULL AND acked_at IS NULL;
            """),
        // One dispatcher holds a SQLite store and never reads it by shard: each delivery written and
        // removed then updates one index fewer (the reads by shard still work, by scanning).
        Migration(version: 10, "DROP INDEX deliveries_by_shard;"),
        // The hub a notification was sent to (NULL: the default hub), whose Send keys may read its outcome.
        Migration(version: 11, "ALTER TABLE outcomes ADD COLUMN hub TEXT;"),
        // Broadcasts stored once for the agents away, and where each agent is (`DeliveryEngine+Parked`).
        Migration(
            version: 12,
            """
            CREATE TABLE broadcasts (notification_id TEXT PRIMARY KEY, sequence INTEGER NOT NULL, expires_at REAL NOT NULL, body TEXT NOT NULL);
            CREATE TABLE broadcast_shards (
                notification_id TEXT NOT NULL,
                shard INTEGER NOT NULL,
                registry_at INTEGER NOT NULL,
                parked INTEGER NOT NULL,
                caught_up INTEGER NOT NULL DEFAULT 0,
                expires_at REAL NOT NULL,
                PRIMARY KEY (notification_id, shard)
            );
            CREATE TABLE agent_positions (
                installation_id TEXT PRIMARY KEY,
                shard INTEGER NOT NULL,
                after INTEGER NOT NULL,
                here INTEGER NOT NULL
            );
            CREATE INDEX agent_positions_here ON agent_positions(shard) WHERE here = 1;
            """),
    ]

    /// Lists of shards are JSON arrays, read with json_each.
    static let sql = DeliverySQL(
        cursor: "SELECT after FROM cursor WHERE id = 1",
        shardCursors: "SELECT s.shard, max(s.after, c.after) AS after FROM shard_cursors s, cursor c WHERE c.id = 1",
        advanceCursor: "UPDATE cursor SET after = ?1 WHERE id = 1 AND after < ?1",
        advanceShardCursors: "UPDATE shard_cursors SET after = ?1 WHERE shard IN (SELECT value FROM json_each(?2)) AND after < ?1",
        insertPayload: "INSERT INTO payloads (notification_id, body) VALUES (?1, ?2) RETURNING id",
        insertDelivery: """
            INSERT OR IGNORE INTO deliveries
              (delivery_id, notification_id, installation_id, shard, template, payload_id, expires_at, rich, delivered_at,
               acked_at, failed_reason, platform, push_channel, headers, payload)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, '')
            """,
        insertAgentDeliveries: DeliverySQL.remembered { rows in
            """
            INSERT OR IGNORE INTO deliveries
              (delivery_id, notification_id, installation_id, shard, template, payload_id, expires_at, rich, delivered_at, payload)
            VALUES \(DeliverySQL.values(rows: rows, width: 9) { "(" + ($0..<$0 + 9).map { "?\($0)" }.joined(separator: ", ") + ", '')" })
            """
        },
        insertTestResult: """
            INSERT OR IGNORE INTO test_results (delivery_id, notification_id, installation_id, platform, push_channel, outcome)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            """,
        replaceTopic: """
            UPDATE deliveries SET expires_at = ?1
            WHERE installation_id = ?2 AND topic = ?3 AND acked_at IS NULL AND delivered_at IS NULL
              AND delivery_id <> ?4 AND expires_at > ?1
            """,
        setTopic: "UPDATE deliveries SET topic = ?1 WHERE delivery_id = ?2",
        markDelivered: "UPDATE deliveries SET delivered_at = ?1 WHERE delivery_id = ?2 AND delivered_at IS NULL",
        removeDelivery: "DELETE FROM deliveries WHERE delivery_id = ?1 AND installation_id = ?2 AND acked_at IS NULL RETURNING notification_id",
        closeDelivery: """
            UPDATE deliveries SET acked_at = ?1, failed_reason = ?2 WHERE delivery_id = ?3 AND installation_id = ?4 AND acked_at IS NULL
            RETURNING notification_id
            """,
        removeExpired: "DELETE FROM deliveries WHERE acked_at IS NULL AND expires_at <= ?1 RETURNING delivery_id, notification_id, platform",
        removeExpiredOfShards: """
            DELETE FROM deliveries WHERE acked_at IS NULL AND expires_at <= ?1 AND shard IN (SELECT value FROM json_each(?2))
            RETURNING delivery_id, notification_id, platform
            """,
        setTestOutcome: "UPDATE test_results SET outcome = ?1, success = ?2 WHERE delivery_id = ?3 AND outcome IS NULL",
        openOutcomes: DeliverySQL.remembered { rows in
            """
            INSERT OR IGNORE INTO outcomes (notification_id, state, enqueued_at, started_at, ended_at, targets, expired, hub)
            VALUES \(DeliverySQL.outcomeValues(rows: rows, marker: "?"))
            """
        },
        openOutcomesAdding: DeliverySQL.remembered { rows in
            """
            INSERT INTO outcomes (notification_id, state, enqueued_at, started_at, ended_at, targets, expired, hub)
            VALUES \(DeliverySQL.outcomeValues(rows: rows, marker: "?"))
            ON CONFLICT (notification_id) DO UPDATE SET
              targets = targets + excluded.targets,
              expired = CASE WHEN state = 'Abandoned' AND excluded.state = 'Abandoned' THEN expired ELSE expired + excluded.expired END,
              state = CASE WHEN 'Completed' IN (state, excluded.state) THEN 'Completed'
                           WHEN 'Abandoned' IN (state, excluded.state) THEN 'Abandoned' ELSE excluded.state END,
              started_at = min(started_at, excluded.started_at), ended_at = max(ended_at, excluded.ended_at)
            """
        },
        addToOutcome: """
            UPDATE outcomes SET delivered = delivered + ?1, acknowledged = acknowledged + ?2, expired = expired + ?3, failed = failed + ?4
            WHERE notification_id = ?5
            """,
        platformCount: "INSERT OR IGNORE INTO platform_outcomes (notification_id, platform, outcome, count) VALUES (?1, ?2, ?3, ?4)",
        platformCountAdding: """
            INSERT INTO platform_outcomes (notification_id, platform, outcome, count) VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT (notification_id, platform, outcome) DO UPDATE SET count = count + excluded.count
            """,
        testNotifications: "SELECT DISTINCT notification_id FROM test_results",
        testResults: """
            SELECT installation_id, platform, push_channel, outcome, success FROM test_results WHERE notification_id = ?1
            ORDER BY delivery_id
            """,
        backlog: "SELECT DISTINCT installation_id FROM deliveries WHERE acked_at IS NULL AND expires_at > ?1 AND platform IS NULL",
        backlogOfShards: """
            SELECT DISTINCT installation_id FROM deliveries
            WHERE acked_at IS NULL AND expires_at > ?1 AND platform IS NULL AND shard IN (SELECT value FROM json_each(?2))
            """,
        pending: """
            SELECT delivery_id, notification_id, template,
                   coalesce((SELECT body FROM payloads p WHERE p.id = deliveries.payload_id), payload) AS body, expires_at, rich,
                   delivered_at IS NOT NULL AS sent
            FROM deliveries
            WHERE installation_id = ?1 AND acked_at IS NULL AND expires_at > ?2
            ORDER BY rowid LIMIT ?3
            """,
        pendingPush: """
            SELECT delivery_id, notification_id, installation_id, platform, push_channel,
                   coalesce((SELECT body FROM payloads p WHERE p.id = deliveries.payload_id), payload) AS body, headers, expires_at
            FROM deliveries
            WHERE platform IS NOT NULL AND acked_at IS NULL AND expires_at > ?1
            ORDER BY rowid LIMIT ?2
            """,
        pendingPushOfShards: """
            SELECT delivery_id, notification_id, installation_id, platform, push_channel,
                   coalesce((SELECT body FROM payloads p WHERE p.id = deliveries.payload_id), payload) AS body, headers, expires_at
            FROM deliveries
            WHERE platform IS NOT NULL AND acked_at IS NULL AND expires_at > ?1 AND shard IN (SELECT value FROM json_each(?3))
            ORDER BY rowid LIMIT ?2
            """,
        outcome: """
            SELECT state, enqueued_at, started_at, ended_at, targets, delivered, acknowledged, expired, failed, hub
            FROM outcomes WHERE notification_id = ?1
            """,
        platformOutcomes: "SELECT platform, outcome, count FROM platform_outcomes WHERE notification_id = ?1",
        waitingPush: """
            SELECT count(*) AS n FROM deliveries
            WHERE notification_id = ?1 AND platform IS NOT NULL AND acked_at IS NULL AND expires_at > ?2
            """,
        openDeliveries: "SELECT count(*) AS n FROM deliveries WHERE acked_at IS NULL",
        outcomeTotals: """
            SELECT count(*) AS notifications, coalesce(sum(targets),0) AS targets, coalesce(sum(delivered),0) AS delivered,
                   coalesce(sum(acknowledged),0) AS acknowledged, coalesce(sum(expired),0) AS expired, coalesce(sum(failed),0) AS failed
            FROM outcomes
            """,
        purge: [
            ("DELETE FROM deliveries WHERE acked_at IS NOT NULL AND acked_at < ?1", 86_400),
            ("DELETE FROM outcomes WHERE ended_at < ?1 AND notification_id NOT IN (SELECT DISTINCT notification_id FROM deliveries)",
             7 * 86_400),
            ("DELETE FROM payloads WHERE notification_id NOT IN (SELECT DISTINCT notification_id FROM deliveries)", nil),
            ("DELETE FROM platform_outcomes WHERE notification_id NOT IN (SELECT notification_id FROM outcomes)", nil),
            ("DELETE FROM test_results WHERE notification_id NOT IN (SELECT notification_id FROM outcomes)", nil),
            ("DELETE FROM dispatchers WHERE seen_at < ?1", 86_400),
        ],
        heartbeat: """
            INSERT INTO dispatchers (id, endpoint, seen_at) VALUES (?1, ?2, ?3)
            ON CONFLICT (id) DO UPDATE SET endpoint = excluded.endpoint, seen_at = excluded.seen_at
            """,
        liveDispatchers: "SELECT count(*) AS n FROM dispatchers WHERE seen_at > ?1",
        renewLeases: "UPDATE leases SET expires_at = ?1 WHERE owner = ?2 RETURNING shard, epoch",
        // One process holds a SQLite store: its transactions alone keep claims apart.
        claimLeases: """
            UPDATE leases SET owner = ?1, endpoint = ?2, expires_at = ?3, epoch = epoch + 1
            WHERE shard IN (SELECT shard FROM leases WHERE owner IS NULL OR expires_at <= ?4 ORDER BY shard LIMIT ?5)
            RETURNING shard, epoch
            """,
        fenceCheck: "SELECT shard FROM leases WHERE owner = ?1 AND (shard || ':' || epoch) IN (SELECT value FROM json_each(?2))",
        releaseLeases: """
            UPDATE leases SET owner = NULL, endpoint = NULL, expires_at = 0 WHERE owner = ?1 AND shard IN (SELECT value FROM json_each(?2))
            """,
        leaseOwners: "SELECT shard, endpoint FROM leases WHERE owner IS NOT NULL AND expires_at > ?1",
        insertBroadcast: "INSERT OR IGNORE INTO broadcasts (notification_id, sequence, expires_at, body) VALUES (?1, ?2, ?3, ?4)",
        insertBroadcastShard: """
            INSERT OR IGNORE INTO broadcast_shards (notification_id, shard, registry_at, parked, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
            """,
        parkedBroadcasts: """
            SELECT s.notification_id, s.shard, s.registry_at, b.body FROM broadcast_shards s JOIN broadcasts b USING (notification_id)
            WHERE s.expires_at > ?1 AND s.shard IN (SELECT value FROM json_each(?2)) ORDER BY b.sequence, s.shard
            """,
        addCaughtUp: "UPDATE broadcast_shards SET caught_up = caught_up + ?1 WHERE notification_id = ?2 AND shard = ?3",
        expireBroadcasts: """
            DELETE FROM broadcast_shards WHERE expires_at <= ?1 AND shard IN (SELECT value FROM json_each(?2))
            RETURNING notification_id, shard, parked, caught_up
            """,
        dropBroadcasts: """
            DELETE FROM broadcasts WHERE expires_at <= ?1
              AND NOT EXISTS (SELECT 1 FROM broadcast_shards s WHERE s.notification_id = broadcasts.notification_id)
            """,
        position: "SELECT after, here FROM agent_positions WHERE installation_id = ?1",
        setPosition: """
            INSERT INTO agent_positions (installation_id, shard, after, here) VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT (installation_id) DO UPDATE SET after = excluded.after, here = excluded.here
            """,
        closePositions: "UPDATE agent_positions SET here = 0, after = ?1 WHERE here = 1 AND shard = ?2",
        insertOwed: """
            INSERT OR IGNORE INTO deliveries (delivery_id, notification_id, installation_id, shard, template, payload, expires_at, rich)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
            """,
        shards: { "[" + $0.sorted().map(String.init).joined(separator: ",") + "]" },
        fencedShards: { "[" + $0.map { "\"\($0)\"" }.joined(separator: ",") + "]" })

    let database: SQLiteDatabase
    let ledger = DeliveryLedger()

    /// A store on a migrated database.
    init(database: SQLiteDatabase) throws {
        self.database = database
        // Deliveries come and go within seconds: a larger page cache keeps their tables in memory.
        try database.execute("PRAGMA cache_size=-65536")
        try assignShards()
        ledger.testNotifications = try testNotificationIds()
    }

    /// Gives deliveries stored before shards were their shard, once.
    private func assignShards() throws {
        guard try database.queryOne("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'deliveries_unsharded'") != nil else { return }
        try database.transaction {
            for row in try database.query("SELECT delivery_id, installation_id FROM deliveries WHERE shard IS NULL") {
                let (id, installationId) = (try row.string("delivery_id", of: "deliveries"), try row.string("installation_id", of: "deliveries"))
                try database.run("UPDATE deliveries SET shard = ? WHERE delivery_id = ?", [Shards.of(installationId), id])
            }
            try database.execute("DROP INDEX deliveries_unsharded")
        }
    }

    func writeTurn(_ body: () throws -> Void) throws {
        try database.beginGroup()
        try write(body)
    }

    /// Writes the deliveries still held, then commits the group. When either fails the whole group
    /// is rolled back, as a crash would lose it: what it held goes with it, and the cursor, moved
    /// back, is read again; the notifications are planned again from the publish service's log.
    func flush() throws {
        do {
            try writeHeld()
            try database.commitGroup()
        } catch {
            database.rollBackGroup()
            ledger.unwritten = UnwrittenDeliveries()
            ledger.knownCursor = nil
            ledger.owedPayloads = [:]
            throw error
        }
    }

    var commits: CommitStrategy { .openGroup }

    var groupOpen: Bool { database.groupOpen }

    func close() throws {
        try flush()
    }

    var engine: SQLiteEngine { SQLiteEngine(database) }
}
