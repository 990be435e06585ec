import Foundation
import HubProtocol
import Postgres
import Storage
import StoreEngines

/// The publish service's store on PostgreSQL, which several publish processes can share. Its
/// tables live in the schema `publish`, named in full in every statement, so that a reconnected
/// session needs no settings. Each statement or transaction commits itself: what a method returns
/// is durable.
///
/// The sequence is a row that each acceptance updates first, so the row's lock orders the writers
/// of every process: sequences commit in order, without gaps, and a reader pulling after a cursor
/// never misses one that commits later with a lower number. The same lock makes a second send with
/// an idempotency key wait for the first to commit, and then find it.
final class PostgresPublishStore: PublishEngine, PostgresBacked {
    static let schema = "publish"
    /// Told, with the sequence, when a notification is accepted; delivered at commit.
    static let notifyChannel = "nh_publish_accepted"

    static let migrations = [
        Migration(
            version: 1,
            """
            CREATE SCHEMA IF NOT EXISTS publish;
            CREATE TABLE publish.stream (id INTEGER PRIMARY KEY CHECK (id = 1), sequence BIGINT NOT NULL);
            INSERT INTO publish.stream (id, sequence) VALUES (1, 0);
            CREATE TABLE publish.notifications (
                sequence BIGINT PRIMARY KEY,
                notification_id TEXT NOT NULL UNIQUE,
                idempotency_key TEXT UNIQUE,
                send BYTEA NOT NULL,
                state TEXT NOT NULL,
                enqueued_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL
            );
            CREATE INDEX notifications_by_expiry ON publish.notifications(expires_at);
            CREATE TABLE publish.scheduled (
                notification_id TEXT PRIMARY KEY,
                idempotency_key TEXT UNIQUE,
                send BYTEA NOT NULL,
                fire_at DOUBLE PRECISION NOT NULL,
                state TEXT NOT NULL,
                enqueued_at DOUBLE PRECISION NOT NULL
            );
            CREATE INDEX scheduled_due ON publish.scheduled(fire_at) WHERE state = 'Scheduled';
            CREATE TABLE publish.rich_blobs (
                sha256 TEXT PRIMARY KEY,
                content_type TEXT NOT NULL,
                size BIGINT NOT NULL,
                expires_at DOUBLE PRECISION NOT NULL,
                data BYTEA NOT NULL
            );
            CREATE INDEX rich_blobs_by_expiry ON publish.rich_blobs(expires_at);
            """),
        // Why a scheduled send was abandoned: it no longer validated when its time came.
        Migration(version: 2, "ALTER TABLE publish.scheduled ADD COLUMN failed_reason TEXT;"),
    ]

    static let sql = PublishSQL(prefix: "publish.", latestSequence: "SELECT sequence FROM publish.stream WHERE id = 1")

    let connection: PostgresConnection
    private let encoder = HubCodec.makeEncoder()
    let decoder = HubCodec.makeDecoder()

    /// Connects, makes the schema when it is missing, and brings it to the code's version.
    /// Every session moves the sequence into the server's history before it accepts anything.
    init(url: String) throws {
        connection = try PostgresConnection(url: url)
        try connection.migrate(Self.migrations, name: Self.schema)
        try connection.followHistory(counter: Self.counter)
    }

    /// The sequence's row, and its name among the store's counters (`store_history.marks`).
    static let counter = "publish.stream"

    var engine: PostgresEngine { PostgresEngine(connection) }

    /// Sends without an idempotency key accepted in the open commit group, inserted together
    /// before it commits (`group`); nil outside a group.
    private var held: [Held]?

    private struct Held {
        let id: String
        let send: Data
        let enqueuedAt: Double
        let expiresAt: Double
    }

    /// A commit group: one transaction, whose sends without an idempotency key are held as they
    /// are accepted and inserted just before the commit, all in one statement (`insertHeld`), one
    /// round trip for the group. Sends with a key, which need a lookup first, go in when they come,
    /// after the sends held before them, so sequences follow the order sends arrived in.
    func group(_ body: () -> Void) throws {
        try connection.transaction {
            held = []
            defer { held = nil }
            body()
            try insertHeld()
        }
    }

    func accept(_ send: SendNotification, timeToLive: Int, now: Date, encoded: Data?) throws -> (AcceptedNotification, isNew: Bool) {
        if send.idempotencyKey == nil {
            guard held != nil else { return (try insertAlone(send, timeToLive: timeToLive, now: now, encoded: encoded), true) }
            let id = RandomID.timeOrdered(at: now)
            let expiresAt = now.addingTimeInterval(TimeInterval(timeToLive))
            held?.append(Held(id: id, send: try encoded ?? encoder.encode(send), enqueuedAt: now.timeIntervalSince1970, expiresAt: expiresAt.timeIntervalSince1970))
            return (AcceptedNotification(sequence: 0, notificationId: id, send: send, enqueuedAt: now, expiresAt: expiresAt), true)
        }
        try insertHeld()
        do {
            return (try connection.transaction { try insert(send, timeToLive: timeToLive, now: now, id: nil) }, true)
        } catch let repeated as Repeated {
            return (repeated.first, false)
        }
    }

    /// Takes the sequence, inserts the row and tells the other processes in one statement, one
    /// round trip to the server: a send without an idempotency key has nothing to look up first. The
    /// statement is atomic, so it needs no savepoint of its own in a commit group; if it fails, the
    /// group's transaction can no longer commit, and every request of the group is refused (none
    /// of them happened).
    private func insertAlone(_ send: SendNotification, timeToLive: Int, now: Date, encoded: Data?) throws -> AcceptedNotification {
        let id = RandomID.timeOrdered(at: now)
        let expiresAt = now.addingTimeInterval(TimeInterval(timeToLive))
        let row = try connection.queryOne(
            Self.insertAlone,
            [id, try encoded ?? encoder.encode(send), NotificationState.enqueued.rawValue, now.timeIntervalSince1970, expiresAt.timeIntervalSince1970])
        guard let row else {
            throw PostgresError(message: "the sequence row publish.stream is missing", operation: "accept a send")
        }
        let sequence = try row.sequence("sequence", of: "notifications")
        return AcceptedNotification(sequence: sequence, notificationId: id, send: send, enqueuedAt: now, expiresAt: expiresAt)
    }

    /// Inserts the sends held so far in the open group.
    private func insertHeld() throws {
        guard let rows = held, !rows.isEmpty else { return }
        held = []
        try connection.run(Self.insertHeld, [
            Int64(rows.count), PostgresValue.textArray(rows.map(\.id)), PostgresValue.byteaArray(rows.map(\.send)),
            PostgresValue.textArray(rows.map { String($0.enqueuedAt) }), PostgresValue.textArray(rows.map { String($0.expiresAt) }),
            NotificationState.enqueued.rawValue,
        ])
    }

    /// (count, ids, sends, enqueued at, expires at, state): takes `count` sequences at once and
    /// numbers the rows in the order given; tells the other processes once.
    static let insertHeld = """
        WITH next AS (UPDATE publish.stream SET sequence = sequence + $1::bigint WHERE id = 1 RETURNING sequence),
        inserted AS (
            INSERT INTO publish.notifications (sequence, notification_id, idempotency_key, send, state, enqueued_at, expires_at)
            SELECT next.sequence - $1::bigint + held.n, held.id, NULL, held.send, $6::text, held.enqueued, held.expires
            FROM next, unnest($2::text[], $3::bytea[], $4::float8[], $5::float8[]) WITH ORDINALITY AS held(id, send, enqueued, expires, n)
            RETURNING sequence
        )
        SELECT count(*), pg_notify('\(notifyChannel)', coalesce(max(sequence), 0)::text) FROM inserted
        """

    /// (id, send, state, enqueued at, expires at) → sequence. The sequence row's update comes first
    /// and holds the row's lock until the transaction ends, as `nextSequence` does.
    static let insertAlone = """
        WITH next AS (UPDATE publish.stream SET sequence = sequence + 1 WHERE id = 1 RETURNING sequence),
        inserted AS (
            INSERT INTO publish.notifications (sequence, notification_id, idempotency_key, send, state, enqueued_at, expires_at)
            SELECT sequence, $1::text, NULL, $2::bytea, $3::text, $4::float8, $5::float8 FROM next RETURNING sequence
        )
        SELECT sequence, pg_notify('\(notifyChannel)', sequence::text) FROM inserted
        """

    /// A send whose idempotency key was accepted before: the transaction rolls back, and with it
    /// the sequence it took.
    private struct Repeated: Error {
        let first: AcceptedNotification
    }

    /// Inserts a send in the open transaction, taking the sequence first. `id` is given when a
    /// scheduled send fires, so it keeps the id its sender was told.
    private func insert(_ send: SendNotification, timeToLive: Int, now: Date, id given: String?) throws -> AcceptedNotification {
        let sequence = try connection.nextSequence(in: "publish.stream")
        if let key = send.idempotencyKey,
            let row = try connection.queryOne("SELECT \(PublishSQL.columns) FROM publish.notifications WHERE idempotency_key = $1", [key])
        {
            throw Repeated(first: try accepted(row))
        }
        let id = given ?? RandomID.timeOrdered(at: now)
        let expiresAt = now.addingTimeInterval(TimeInterval(timeToLive))
        try connection.run(
            """
            INSERT INTO publish.notifications (sequence, notification_id, idempotency_key, send, state, enqueued_at, expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            """,
            [Int64(sequence), id, send.idempotencyKey, try encoder.encode(send), NotificationState.enqueued.rawValue,
             now.timeIntervalSince1970, expiresAt.timeIntervalSince1970])
        // Delivered to the other publish processes when the transaction commits.
        try connection.notify(Self.notifyChannel, payload: String(sequence))
        return AcceptedNotification(sequence: sequence, notificationId: id, send: send, enqueuedAt: now, expiresAt: expiresAt)
    }

    // MARK: Scheduled sends

    func schedule(_ send: SendNotification, fireAt: Date, now: Date) throws -> String {
        func existing() throws -> String? {
            guard let key = send.idempotencyKey else { return nil }
            return try connection.queryOne("SELECT notification_id FROM publish.scheduled WHERE idempotency_key = $1", [key])
                .map { try $0.string("notification_id", of: "scheduled") }
        }
        if let id = try existing() { return id }
        let id = RandomID.timeOrdered(at: now)
        // A process that scheduled the same key meanwhile wins; its row is read once it has committed.
        let inserted = try connection.run(
            """
            INSERT INTO publish.scheduled (notification_id, idempotency_key, send, fire_at, state, enqueued_at)
            VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (idempotency_key) DO NOTHING
            """,
            [id, send.idempotencyKey, try encoder.encode(send), fireAt.timeIntervalSince1970,
             NotificationState.scheduled.rawValue, now.timeIntervalSince1970])
        return inserted == 1 ? id : try existing() ?? id
    }

    /// Each due send is claimed in its own transaction with FOR UPDATE SKIP LOCKED, so that another
    /// process firing at the same time takes the next one, or none; a claimed send is marked fired
    /// in the same transaction that accepts it. The claim comes before the sequence; no writer
    /// takes the two locks the other way round.
    func fireDue(now: Date, timeToLive: (SendNotification) throws(HubError) -> Int) throws -> FiredSends {
        var round = FiredSends()
        while round.count < 500 {
            let claimed = try connection.transaction { () -> Bool in
                guard let row = try connection.queryOne(
                    """
                    SELECT notification_id, send FROM publish.scheduled WHERE state = $1 AND fire_at <= $2
                    ORDER BY fire_at LIMIT 1 FOR UPDATE SKIP LOCKED
                    """, [NotificationState.scheduled.rawValue, now.timeIntervalSince1970])
                else { return false }
                try fire(row, timeToLive: timeToLive, into: &round) { try insert($0, timeToLive: $1, now: now, id: $2) }
                return true
            }
            guard claimed else { break }
        }
        return round
    }

    /// One statement: a send being fired holds its row, so this waits for the fire to commit and
    /// then finds the send fired.
    func cancel(_ id: String) throws {
        let canceled = try connection.run(
            "UPDATE publish.scheduled SET state = $1 WHERE notification_id = $2 AND state = $3",
            [NotificationState.canceled.rawValue, id, NotificationState.scheduled.rawValue])
        guard canceled == 0 else { return }
        let state = try connection.queryOne("SELECT state FROM publish.scheduled WHERE notification_id = $1", [id])
            .map { try $0.string("state", of: "scheduled") }
        throw HubError.cannotCancel(id, state: state)
    }
}
