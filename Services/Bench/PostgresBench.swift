import Foundation
import HubProtocol
import Postgres
import ServiceKit
import Synchronization

/// Durable acceptance through the real services with their stores on PostgreSQL, beside the same
/// with SQLite files and beside raw inserts into the same PostgreSQL server, in one run. The server
/// is a throwaway one (`python3 Tests/Support/pgserver.py serve`, run as a child process). Each
/// round starts fresh services on SQLite and times N template sends from 4 backends at once (the
/// load of BreakingNewsBench's accept figure, without agents), then the same on PostgreSQL in a new
/// database, then inserts N rows shaped like the accepted notifications into that database from 4
/// connections: one per commit (the reference), and 100 per commit. The same sends are also timed
/// pipelined, as the request path's figure is (8 clients with 32 each in flight), on either store.
/// The median of the rounds counts.
enum PostgresBench {
    static let rounds = 3
    static let backends = 4
    static let batch = 100

    static let postgresName = "durable accepts on PostgreSQL"
    static let sqliteName = "durable accepts on SQLite"
    static let rawName = "raw inserts, one per commit, 4 connections"
    static let batchedName = "raw inserts, \(batch) per commit"
    static let pipelinedName = "durable accepts on PostgreSQL, pipelined"
    static let sqlitePipelinedName = "durable accepts on SQLite, pipelined"

    /// The bytes of one send as the publish service stores it.
    static var bodySize: Int { (try? HubCodec.makeEncoder().encode(BreakingNewsBench.send(0)).count) ?? 0 }

    static func run(sends: Int) throws -> [BenchResult] {
        let server = try ChildScript.start(
            [try RepositoryFile.locate("Tests/Support/pgserver.py"), "serve"], what: "a throwaway PostgreSQL server", timeout: 60
        ) { $0.hasPrefix("postgresql://") }
        defer { server.stop() }
        var sqlite = Rounds(), postgres = Rounds(), single = Rounds(), batched = Rounds(), piped = Rounds(), sqlitePiped = Rounds()
        // Alternately, so that neither store runs on a machine the other has just warmed or left busy.
        for round in 1...rounds {
            sqlite.add(Result { try accepts(sends: sends, store: nil) }, round: round)
            sqlitePiped.add(Result { try accepts(sends: sends, store: nil, pipelined: true) }, round: round)
            let database = Result { try PostgresConnection.createDatabase(on: server.line, prefix: "nh_bench_") }
            postgres.add(Result { try accepts(sends: sends, store: try database.get()) }, round: round)
            let pipedDatabase = Result { try PostgresConnection.createDatabase(on: server.line, prefix: "nh_bench_") }
            piped.add(Result { try accepts(sends: sends, store: try pipedDatabase.get(), pipelined: true) }, round: round)
            single.add(Result { try inserts(sends, perCommit: 1, database: try database.get()) }, round: round)
            batched.add(Result { try inserts(sends, perCommit: batch, database: try database.get()) }, round: round)
        }
        let load = "\(sends.formatted()) template sends to tag World, \(backends) backends"
        let rows = "\(sends.formatted()) rows as publish.notifications holds them (the same send bodies), \(backends) connections"
        let pipelinedLoad = "\(sends.formatted()) template sends, \(HTTPSendBench.pipelinedClients) clients with \(HTTPSendBench.window) each in flight"
        let fsyncOff = "throwaway server with fsync and synchronous_commit off"
        return [
            postgres.result(
                name: postgresName, unit: "send/s", count: sends, baseline: rawName,
                note: "\(load); registry, publish and sync stores in a new database, sends waiting at once share a commit; \(fsyncOff)"),
            piped.result(
                name: pipelinedName, unit: "send/s", count: sends, baseline: rawName,
                note: "\(pipelinedLoad); stores as above; \(fsyncOff); goal 0.4×"),
            single.result(name: rawName, unit: "row/s", count: sends, note: "\(rows), each INSERT its own transaction; \(fsyncOff)"),
            sqlite.result(
                name: sqliteName, unit: "send/s", count: sends,
                note: "\(load); SQLite files, WAL, synchronous=FULL, sends waiting at once share a commit"),
            sqlitePiped.result(
                name: sqlitePipelinedName, unit: "send/s", count: sends,
                note: "context: \(pipelinedLoad); SQLite files as above"),
            batched.result(
                name: batchedName, unit: "row/s", count: sends, note: "context: \(rows), \(batch) INSERTs per transaction; \(fsyncOff)"),
        ]
    }

    /// One round of a hub figure: fresh services with their stores in `store` (a PostgreSQL URL,
    /// or SQLite files when nil), then `sends` template sends from 4 backends at once, each client
    /// connected before the clock starts; the seconds until the last was accepted. `pipelined`: from
    /// 8 clients with 32 sends each in flight instead (HTTPSendBench's pipelined load). Services that
    /// do not all answer at start are started once more, on new ports, before the round fails.
    static func accepts(sends: Int, store: String?, pipelined: Bool = false, attempts: Int = 2) throws -> Double {
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        if let store { cluster.environment["NH_STORE"] = store }
        do {
            try cluster.startServices()
        } catch where attempts > 1 {
            cluster.stopAll()
            return try accepts(sends: sends, store: store, pipelined: pipelined, attempts: attempts - 1)
        }
        let publish = cluster.environment["NH_PUBLISH_REQUESTS"]!
        let credential = try cluster.credential()
        let bus = cluster.bus
        if pipelined {
            let clients = HTTPSendBench.pipelinedClients
            let round = HTTPSendBench.measureThreads(clients: clients) { thread in
                try HTTPSendBench.pipelined(publish, credential: credential, bus: bus, round: 0, sends: sends, clients: clients, thread: thread)
            }
            guard round.count == sends else { throw BenchError("\(round.count) of \(sends) sends accepted") }
            return round.seconds
        }
        let round = HTTPSendBench.measure(sends: sends, clients: backends) { _ in
            let client = try HubCluster.client(publish, credential: credential, bus: bus)
            return { index in (try? client.call(BreakingNewsBench.send(index))) != nil }
        }
        guard round.count == sends else { throw BenchError("\(round.count) of \(sends) sends accepted") }
        return round.seconds
    }

    /// One round of a raw figure: `count` rows into a new table like publish.notifications (its
    /// columns, keys and index) in `database`, from 4 connections at once, `perCommit` INSERTs a
    /// transaction (one: each INSERT commits itself); the seconds until the last committed.
    static func inserts(_ count: Int, perCommit: Int, database: String) throws -> Double {
        let table = "raw_\(perCommit)_per_commit"
        let setup = try PostgresConnection(url: database)
        try setup.execute("CREATE TABLE \(table) (LIKE publish.notifications INCLUDING ALL)")
        setup.close()
        let insert = """
            INSERT INTO \(table) (sequence, notification_id, idempotency_key, send, state, enqueued_at, expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            """
        let timeToLive = HubConfig().defaultTimeToLive
        let failure = Mutex<String?>(nil)
        let round = HTTPSendBench.measure(sends: count, clients: backends) { _ in
            let connection = try PostgresConnection(url: database)
            let encoder = HubCodec.makeEncoder()
            var open = 0
            return { index in
                do {
                    if perCommit > 1 && open == 0 { try connection.execute("BEGIN") }
                    try connection.run(insert, try row(index, encoder: encoder, now: Date(), timeToLive: timeToLive))
                    open += 1
                    // A connection's last rows commit as a smaller batch.
                    if perCommit > 1 && (open == perCommit || index + backends >= count) {
                        try connection.execute("COMMIT")
                        open = 0
                    }
                    return true
                } catch {
                    failure.withLock { $0 = $0 ?? "\(error)" }
                    return false
                }
            }
        }
        if let problem = failure.withLock({ $0 }) { throw BenchError(problem) }
        guard round.count == count else { throw BenchError("\(round.count) of \(count) rows inserted") }
        return round.seconds
    }

    /// The row the publish service stores when it accepts `BreakingNewsBench.send(index)`, in the
    /// order of publish.notifications' columns: sequence, notification_id, idempotency_key (none),
    /// send (the send as JSON), state, enqueued_at, expires_at.
    static func row(_ index: Int, encoder: JSONEncoder, now: Date, timeToLive: Int) throws -> [PostgresBindable?] {
        [
            Int64(index + 1), RandomID.timeOrdered(at: now), nil, try encoder.encode(BreakingNewsBench.send(index)),
            NotificationState.enqueued.rawValue, now.timeIntervalSince1970, now.addingTimeInterval(TimeInterval(timeToLive)).timeIntervalSince1970,
        ]
    }
}
