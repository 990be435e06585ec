import Foundation
import Postgres
import Storage
import Testing

/// The store's history on PostgreSQL: learned at each session's start, a new epoch when the server
/// is on a new timeline (a promoted replica), counters moved above every number of the older
/// histories, and where each stood marked. A failover is played by telling the store its last
/// history began on another timeline than the server's: the next session then begins a new one,
/// as it would on a promoted replica. Each test has a database of its own.
@Suite(
    "Store history on PostgreSQL",
    .enabled(if: TestServer.url != nil, "NH_TEST_POSTGRES is not set: run `python3 Tests/Support/pgserver.py run -- swift test`"))
struct StoreHistoryTests {
    /// A fresh database with a counter table `c` (row 1 at `at`).
    static func database(counterAt at: Int64 = 0) throws -> String {
        let url = try PostgresConnection.createDatabase(on: try #require(TestServer.url), prefix: "nh_history_test_")
        let setup = try PostgresConnection(url: url)
        defer { setup.close() }
        try setup.execute("CREATE TABLE c (id INTEGER PRIMARY KEY, sequence BIGINT NOT NULL)")
        try setup.run("INSERT INTO c (id, sequence) VALUES (1, $1)", [at])
        return url
    }

    /// Plays a failover: the server seems to have moved to another timeline since the last history began.
    static func failOver(_ url: String) throws {
        let admin = try PostgresConnection(url: url)
        defer { admin.close() }
        try admin.execute("UPDATE store_history.histories SET timeline = timeline + 1000 WHERE epoch = (SELECT max(epoch) FROM store_history.histories)")
    }

    /// Ends `connection`'s session from the server's side, as a server that goes away does.
    static func endSession(of connection: PostgresConnection, url: String) throws {
        let pid = try #require(try connection.queryOne("SELECT pg_backend_pid()")?[0].int)
        let admin = try PostgresConnection(url: url)
        defer { admin.close() }
        #expect(try admin.queryOne("SELECT pg_terminate_backend($1)", [pid])?[0].bool == true)
        _ = try? connection.queryOne("SELECT 1")
    }

    @Test("the first history is epoch 0 on the server's timeline; every process reaching that server shares it")
    func firstHistory() throws {
        let url = try Self.database(counterAt: 7)
        let a = try PostgresConnection(url: url), b = try PostgresConnection(url: url)
        defer { a.close(); b.close() }
        try a.followHistory { try a.enter($0, counter: "c") }
        try b.followHistory { _ in }
        let history = try #require(a.history)
        #expect(history.epoch == 0 && history.base == 0 && history.timeline >= 1)
        #expect(b.history == history)
        #expect(try a.queryOne("SELECT count(*) FROM store_history.histories")?[0].int == 1)
        #expect(try a.queryOne("SELECT sequence FROM c")?[0].int == 7, "a counter of epoch 0 does not move")
        #expect(a.takeSessionEvents().isEmpty, "the first session is no event")
    }

    @Test("a session on a new timeline begins the next epoch: the counter moves to its base, where it stood is marked, and positions are checked against it")
    func failover() throws {
        let url = try Self.database(counterAt: 20)
        let old = try PostgresConnection(url: url)
        defer { old.close() }
        try old.followHistory { try old.enter($0, counter: "c") }
        let before = try #require(old.history)
        try Self.failOver(url)

        // Two processes reach the promoted server at once: one history begins, not two.
        let a = try PostgresConnection(url: url), b = try PostgresConnection(url: url)
        defer { a.close(); b.close() }
        try a.followHistory { try a.enter($0, counter: "c") }
        try b.followHistory { try b.enter($0, counter: "c") }
        let after = try #require(a.history)
        #expect(after.epoch == 1 && after.id != before.id && b.history == after)
        #expect(try a.queryOne("SELECT count(*) FROM store_history.histories")?[0].int == 2)
        let base = HistoryNumbering.base(epoch: 1)
        #expect(try a.queryOne("SELECT sequence FROM c")?[0].int64 == Int64(base), "moved once, to the base")
        #expect(try a.nextMark("c", after: 0) == 20 && a.nextMark("c", after: 1) == nil)
        let next = try #require(try a.queryOne("UPDATE c SET sequence = sequence + 1 WHERE id = 1 RETURNING sequence")?[0].int64)
        #expect(UInt64(next) == base + 1)
        // A reader that had seen up to 24 in the old history lost 21–24; one at 20 lost nothing.
        #expect(try a.check(24, of: "c", latest: UInt64(next)) == .rewound(shared: 20))
        #expect(try a.check(20, of: "c", latest: UInt64(next)) == .current)
        #expect(try a.check(base + 1, of: "c", latest: UInt64(next)) == .current)
        #expect(try a.check(base + 2, of: "c", latest: UInt64(next)) == .rewound(shared: base + 1))

        // The process that was on the old server learns it at its next session, before anything runs in it.
        try Self.endSession(of: old, url: url)
        #expect(old.reconnectIfNeeded())
        #expect(old.takeSessionEvents() == [.rewound(from: before, to: after)])
        #expect(old.history == after)
        // A later lost session on the same history is only renewed.
        try Self.endSession(of: old, url: url)
        #expect(old.reconnectIfNeeded())
        #expect(old.takeSessionEvents() == [.renewed(after)])
        #expect(try old.queryOne("SELECT sequence FROM c")?[0].int64 == next, "entering again moves nothing")
    }

    @Test("a second failover marks where the counter stood in the first new history; a counter idle through one history is marked from its own")
    func secondFailover() throws {
        let url = try Self.database(counterAt: 5)
        let connection = try PostgresConnection(url: url)
        defer { connection.close() }
        try connection.execute("CREATE TABLE idle (id INTEGER PRIMARY KEY, sequence BIGINT NOT NULL); INSERT INTO idle VALUES (1, 3)")
        try connection.followHistory { _ in }
        try Self.failOver(url)
        let one = try PostgresConnection(url: url)
        try one.followHistory { try one.enter($0, counter: "c") }
        try one.run("UPDATE c SET sequence = sequence + 4 WHERE id = 1")
        one.close()
        try Self.failOver(url)
        let two = try PostgresConnection(url: url)
        defer { two.close() }
        try two.followHistory { try two.enter($0, counter: "c"); try two.enter($0, counter: "idle") }
        #expect(two.history?.epoch == 2)
        let base1 = HistoryNumbering.base(epoch: 1), base2 = HistoryNumbering.base(epoch: 2)
        #expect(try two.nextMark("c", after: 0) == 5 && two.nextMark("c", after: 1) == base1 + 4)
        #expect(try two.nextMark("idle", after: 0) == 3 && two.nextMark("idle", after: 1) == 3)
        #expect(try two.check(base1 + 4, of: "c", latest: base2) == .current)
        #expect(try two.check(base1 + 6, of: "c", latest: base2) == .rewound(shared: base1 + 4))
        #expect(try two.check(6, of: "c", latest: base2) == .rewound(shared: 5))
    }

    @Test("the replication as the primary sees it: no standby is a risk, and commits wait for none")
    func replication() throws {
        let url = try Self.database()
        let connection = try PostgresConnection(url: url)
        defer { connection.close() }
        let replication = try connection.replication()
        #expect(replication.timeline >= 1 && replication.standbys.isEmpty && !replication.commitsWaitForStandby)
        #expect(replication.risk?.contains("no standby") == true)
        #expect(replication.details["storeRole"] == "primary" && replication.details["storeStandbys"] == "none")
        let asynchronous = PostgresReplication(
            timeline: 2, synchronousStandbyNames: "", synchronousCommit: "on",
            standbys: [.init(name: "r1", state: "streaming", syncState: "async", lagBytes: 4_096, replayLagSeconds: 1.5)])
        #expect(asynchronous.risk?.contains("asynchronous") == true && asynchronous.details["storeStandbyLagBytesMax"] == "4096")
        let synchronous = PostgresReplication(
            timeline: 2, synchronousStandbyNames: "ANY 1 (r1, r2)", synchronousCommit: "on",
            standbys: [.init(name: "r1", state: "streaming", syncState: "quorum", lagBytes: 0, replayLagSeconds: nil),
                       .init(name: "r2", state: "streaming", syncState: "quorum", lagBytes: 0, replayLagSeconds: nil)])
        #expect(synchronous.commitsWaitForStandby && synchronous.risk == nil)
        #expect(synchronous.details["storeStandbys"] == "r1 streaming quorum lag 0 B; r2 streaming quorum lag 0 B")
    }
}
