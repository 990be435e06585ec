import Foundation
@testable import Postgres
import Storage
import Synchronization
import Testing

/// The server the tests use: NH_TEST_POSTGRES, which `python3 Tests/Support/pgserver.py run -- …` sets.
enum TestServer {
    static let url = ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"].flatMap { $0.isEmpty ? nil : $0 }

    /// A connection whose search path is `schema`, created when missing; each test works in a
    /// schema of its own so that the tests can run at once.
    static func connect(schema: String) throws -> PostgresConnection {
        let url = try #require(url)
        let options = "options=-c%20search_path%3D\(schema)"
        let connection = try PostgresConnection(url: url + (url.contains("?") ? "&" : "?") + options)
        try connection.execute("CREATE SCHEMA IF NOT EXISTS \(schema)")
        return connection
    }

    static func newSchema() -> String { "t_" + UUID().uuidString.prefix(13).lowercased().replacingOccurrences(of: "-", with: "") }

    /// Runs `body` with a connection in a new schema, dropping the schema afterwards.
    static func withScratch<T>(_ body: (PostgresConnection, String) throws -> T) throws -> T {
        let schema = newSchema()
        let connection = try connect(schema: schema)
        defer {
            _ = connection.reconnectIfNeeded()
            try? connection.execute("DROP SCHEMA \(schema) CASCADE")
            connection.close()
        }
        return try body(connection, schema)
    }
}

@Suite(
    "PostgreSQL connection",
    .enabled(
        if: TestServer.url != nil,
        "NH_TEST_POSTGRES is not set: run `python3 Tests/Support/pgserver.py run -- swift test` for the PostgreSQL tests"))
struct PostgresConnectionTests {
    static let migrations = [
        Migration(version: 1, "CREATE TABLE items (id bigserial PRIMARY KEY, name text NOT NULL UNIQUE); SELECT pg_sleep(0.2);"),
        Migration(version: 2, "ALTER TABLE items ADD COLUMN payload bytea; INSERT INTO items (name) VALUES ('seed');"),
    ]

    @Test("every bindable type goes in and comes back, NULLs too; bytea keeps zero bytes in hex and escape output")
    func roundTrip() throws {
        try TestServer.withScratch { db, _ in
            try db.execute(
                """
                CREATE TABLE everything (
                    t text, i bigint, small integer, d double precision, b boolean, bytes bytea, at double precision,
                    u uuid, n text);
                """)
            let text = "héllo ✓ 🚀 'quoted' \"double\" \\ back"
            let bytes = Data([0, 1, 0, 255, 0, 0x5c, 0x78])
            let date = Date(timeIntervalSince1970: 1_700_000_000.25)
            let uuid = UUID()
            let inserted = try db.run(
                "INSERT INTO everything VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                [text, Int64.max, Int32(-7), 0.1, true, bytes, date, uuid, nil])
            #expect(inserted == 1)
            try db.run(
                "INSERT INTO everything VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                ["", Int.min, nil, -Double.infinity, false, Data(), nil, nil, nil])
            let rows = try db.query("SELECT t, i, small, d, b, bytes, at, u, n FROM everything ORDER BY i DESC")
            #expect(rows.count == 2)
            let first = rows[0]
            #expect(first[0].string == text)
            #expect(first[1].int64 == Int64.max)
            #expect(first[2].int == -7)
            #expect(first[3].double == 0.1)
            #expect(first[4].bool == true)
            #expect(first[5].data == bytes)
            #expect(first[6].date == date)
            #expect(first[7].string == uuid.uuidString.lowercased())
            #expect(first[8].isNull && first[8].string == nil && first[8].int == nil && first[8].data == nil)
            #expect(first["t"].string == text && first["missing"].isNull && first[42].isNull)
            let second = rows[1]
            #expect(second[0].string == "" && !second[0].isNull)
            #expect(second[1].int == Int.min)
            #expect(second[2].isNull && second[6].isNull)
            #expect(second[3].double == -Double.infinity)
            #expect(second[4].bool == false)
            #expect(second[5].data == Data() && !second[5].isNull)

            #expect(try db.queryOne("SELECT $1::text", [Data([0x61, 0, 0x62])])?[0].string == "\\x610062")
            #expect(try db.queryOne("SELECT length($1)", [bytes])?[0].int == bytes.count)
            #expect(try db.queryOne("SELECT 'NaN'::float8")?[0].double?.isNaN == true)
            try db.execute("SET bytea_output = 'escape'")
            #expect(try db.queryOne("SELECT bytes FROM everything WHERE b")?[0].data == bytes)
            #expect(try db.queryOne("SELECT 1 WHERE false") == nil)
        }
    }

    @Test("array parameters: bytea[] in binary form keeps every byte, text[] keeps quotes, backslashes and commas")
    func arrays() throws {
        try TestServer.withScratch { db, _ in
            let blobs = [Data([0, 1, 2, 255]), Data(), Data("{\"a\":\"b\\\\c\"}".utf8)]
            let texts = ["plain", "with \"quotes\", commas", "back\\slash", "", "NULL", "ünï {braces}"]
            let rows = try db.query(
                "SELECT b, t, n FROM unnest($1::bytea[], $2::text[]) WITH ORDINALITY AS x(b, t, n) ORDER BY n",
                [PostgresValue.byteaArray(blobs), PostgresValue.textArray(texts)])
            #expect(rows.count == texts.count)
            #expect(rows.prefix(blobs.count).map { $0[0].data } == blobs)
            #expect(rows.map { $0[1].string } == texts)
            #expect(try db.queryOne("SELECT cardinality($1::float8[])", [PostgresValue.textArray(["1.5", "1.8e+09"])])?[0].int == 2)
            #expect(try db.queryOne("SELECT cardinality($1::bytea[])", [PostgresValue.byteaArray([])])?[0].int == 0)
        }
    }

    @Test("run returns the rows a statement inserted, changed, deleted or returned")
    func rowsAffected() throws {
        try TestServer.withScratch { db, _ in
            try db.execute("CREATE TABLE counts (n integer)")
            #expect(try db.run("INSERT INTO counts SELECT generate_series(1, 5)") == 5)
            #expect(try db.run("UPDATE counts SET n = n * 10 WHERE n > $1", [3]) == 2)
            #expect(try db.run("DELETE FROM counts WHERE n >= $1", [40]) == 2)
            #expect(try db.run("SELECT * FROM counts") == 3)
            #expect(try db.run("CREATE INDEX counts_n ON counts (n)") == 0)
            #expect(try db.query("SELECT n FROM counts ORDER BY n").compactMap { $0[0].int } == [1, 2, 3])
        }
    }

    @Test("a transaction commits, rolls back when it throws, and a nested one rolls back alone")
    func transactions() throws {
        try TestServer.withScratch { db, _ in
            try db.execute("CREATE TABLE items (name text UNIQUE)")
            struct Boom: Error {}
            #expect(throws: Boom.self) {
                try db.transaction {
                    try db.run("INSERT INTO items VALUES ('lost')")
                    throw Boom()
                }
            }
            #expect(!db.isInTransaction)
            let value = try db.transaction {
                try db.run("INSERT INTO items VALUES ('outer')")
                try? db.transaction {
                    try db.run("INSERT INTO items VALUES ('inner')")
                    throw Boom()
                }
                // A failed statement inside a savepoint leaves the outer transaction usable.
                #expect(throws: PostgresError.self) {
                    try db.transaction { try db.run("INSERT INTO items VALUES ('outer')") }
                }
                try db.transaction { try db.run("INSERT INTO items VALUES ('kept')") }
                return 42
            }
            #expect(value == 42)
            #expect(try db.query("SELECT name FROM items ORDER BY name").compactMap { $0[0].string } == ["kept", "outer"])
        }
    }

    @Test("a transaction whose statement failed inside it, the error caught, is rolled back rather than committed")
    func abortedTransaction() throws {
        try TestServer.withScratch { db, _ in
            try db.execute("CREATE TABLE items (name text UNIQUE)")
            let error = #expect(throws: PostgresError.self) {
                try db.transaction {
                    try db.run("INSERT INTO items VALUES ('a')")
                    _ = try? db.run("INSERT INTO items VALUES ('a')")
                }
            }
            #expect(error?.sqlState == "25P02")
            #expect(try db.queryOne("SELECT count(*) FROM items")?[0].int == 0)
            #expect(!db.isInTransaction)
            try db.transaction { try db.run("INSERT INTO items VALUES ('b')") }
            #expect(try db.queryOne("SELECT count(*) FROM items")?[0].int == 1)
        }
    }

    @Test("a unique violation, a syntax error and other server errors map to SQLSTATE and message; the connection goes on")
    func errors() throws {
        try TestServer.withScratch { db, _ in
            try db.execute("CREATE TABLE items (name text PRIMARY KEY)")
            try db.run("INSERT INTO items VALUES ($1)", ["a"])
            let unique = #expect(throws: PostgresError.self) { try db.run("INSERT INTO items VALUES ($1)", ["a"]) }
            #expect(unique?.isUniqueViolation == true)
            #expect(unique?.isConnectionLost == false)
            #expect(unique?.detail?.contains("(name)=(a)") == true)

            let syntax = #expect(throws: PostgresError.self) { try db.query("SELEKT 1") }
            #expect(syntax?.sqlState == "42601")
            #expect(syntax?.message.contains("syntax error") == true)
            #expect(syntax?.description.contains("SELEKT 1") == true)
            let inExecute = #expect(throws: PostgresError.self) { try db.execute("SELECT 1; SELEKT 2") }
            #expect(inExecute?.sqlState == "42601")

            let missing = #expect(throws: PostgresError.self) { try db.query("SELECT * FROM nowhere") }
            #expect(missing?.sqlState == "42P01")
            let count = #expect(throws: PostgresError.self) { try db.query("SELECT $1::int + $2::int", [1]) }
            #expect(count?.isConnectionLost == false)
            let zero = #expect(throws: PostgresError.self) { try db.run("INSERT INTO items VALUES ($1)", ["a\u{0}b"]) }
            #expect(zero?.sqlState == "22021")
            let division = #expect(throws: PostgresError.self) { try db.query("SELECT 1 / $1::int", [0]) }
            #expect(division?.sqlState == "22012")
            let copy = #expect(throws: PostgresError.self) { try db.execute("COPY items FROM STDIN") }
            #expect(copy?.message.contains("COPY") == true)
            #expect(throws: PostgresError.self) { try db.execute("COPY items TO STDOUT") }
            #expect(try db.queryOne("SELECT count(*) FROM items")?[0].int == 1)
        }
    }

    @Test("a cached statement whose result changes shape after ALTER TABLE is prepared again")
    func statementCacheAfterSchemaChange() throws {
        try TestServer.withScratch { db, _ in
            try db.execute("CREATE TABLE shapes (a integer); INSERT INTO shapes VALUES (1)")
            #expect(try db.queryOne("SELECT * FROM shapes WHERE a = $1", [1])?.count == 1)
            try db.execute("ALTER TABLE shapes ADD COLUMN b text DEFAULT 'x'")
            let row = try db.queryOne("SELECT * FROM shapes WHERE a = $1", [1])
            #expect(row?.count == 2 && row?["b"].string == "x")
            try db.execute("DEALLOCATE ALL")
            #expect(try db.queryOne("SELECT * FROM shapes WHERE a = $1", [1])?.count == 2)
        }
    }

    @Test("migrations run in order, a second run changes nothing, and the version is kept per name")
    func migrate() throws {
        try TestServer.withScratch { db, _ in
            #expect(try db.schemaVersion(name: "items") == 0)
            try db.migrate(Self.migrations, name: "items")
            try db.migrate(Self.migrations, name: "items")
            #expect(try db.schemaVersion(name: "items") == 2)
            #expect(try db.schemaVersion(name: "other") == 0)
            #expect(try db.queryOne("SELECT count(*) FROM items")?[0].int == 1)
            try db.run("INSERT INTO items (name, payload) VALUES ($1, $2)", ["a", Data([1, 0, 2])])
            #expect(try db.queryOne("SELECT payload FROM items WHERE name = $1", ["a"])?[0].data == Data([1, 0, 2]))
        }
    }

    @Test("two connections migrating at once both end at the last version, each step applied once")
    func concurrentMigrate() throws {
        let schema = TestServer.newSchema()
        let setup = try TestServer.connect(schema: schema)
        defer {
            try? setup.execute("DROP SCHEMA \(schema) CASCADE")
            setup.close()
        }
        let failures = Mutex<[String]>([])
        let versions = Mutex<[Int]>([])
        let ready = DispatchGroup()
        let go = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for _ in 0..<2 {
            ready.enter()
            done.enter()
            Thread {
                defer { done.leave() }
                do {
                    let db = try TestServer.connect(schema: schema)
                    ready.leave()
                    go.wait()
                    try db.migrate(Self.migrations, name: "items")
                    let version = try db.schemaVersion(name: "items")
                    versions.withLock { $0.append(version) }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }.start()
        }
        ready.wait()
        go.signal()
        go.signal()
        done.wait()
        #expect(failures.withLock { $0 } == [])
        #expect(versions.withLock { $0 } == [2, 2])
        #expect(try setup.queryOne("SELECT count(*) FROM items WHERE name = 'seed'")?[0].int == 1)
    }

    @Test("a database newer than the code is refused, and a failing step leaves the version where it was")
    func newerAndFailing() throws {
        try TestServer.withScratch { db, _ in
            try db.migrate(Array(Self.migrations.prefix(1)), name: "items")
            let failing = Migration(version: 2, "CREATE TABLE ok (x integer); THIS IS NOT SQL;")
            #expect(throws: PostgresError.self) { try db.migrate([Self.migrations[0], failing], name: "items") }
            #expect(try db.schemaVersion(name: "items") == 1)
            #expect(try db.queryOne("SELECT to_regclass('ok')")?[0].isNull == true)

            try db.migrate(Self.migrations, name: "items")
            let refused = #expect(throws: PostgresError.self) {
                try db.migrate(Array(Self.migrations.prefix(1)), name: "items")
            }
            #expect(refused?.message.contains("newer than this build knows") == true)
            #expect(try db.schemaVersion(name: "items") == 2)
        }
    }

    @Test("a NOTIFY from another connection makes the socket readable and shows in notifications()")
    func listenNotify() throws {
        try TestServer.withScratch { listener, schema in
            let channel = "nh events \(schema)"
            try listener.listen(channel)
            #expect(try listener.notifications().isEmpty)
            let sender = try TestServer.connect(schema: schema)
            defer { sender.close() }
            try sender.notify(channel, payload: "first ✓")
            try sender.transaction {
                try sender.run("SELECT pg_notify($1, $2)", [channel, "second"])
                try sender.notify("another channel", payload: "not for us")
            }
            var received: [(channel: String, payload: String)] = []
            let deadline = Date().addingTimeInterval(5)
            while received.count < 2, Date() < deadline {
                var descriptor = pollfd(fd: listener.socket, events: Int16(POLLIN), revents: 0)
                #expect(poll(&descriptor, 1, 5_000) >= 0)
                received += try listener.notifications()
            }
            #expect(received.map(\.channel) == [channel, channel])
            #expect(received.map(\.payload) == ["first ✓", "second"])
            try listener.unlisten(channel)
            try sender.notify(channel, payload: "after")
            _ = try listener.query("SELECT pg_sleep(0.05)")
            #expect(try listener.notifications().isEmpty)
        }
    }

    @Test("a connection the server ended reports it, reconnects, and listens again")
    func reconnect() throws {
        try TestServer.withScratch { db, schema in
            let channel = "reconnect \(schema)"
            try db.listen(channel)
            #expect(try db.queryOne("SELECT $1::int", [1])?[0].int == 1)
            let pid = try #require(try db.queryOne("SELECT pg_backend_pid()")?[0].int)
            let other = try TestServer.connect(schema: schema)
            defer { other.close() }
            #expect(try other.queryOne("SELECT pg_terminate_backend($1)", [pid])?[0].bool == true)
            let lost = #expect(throws: PostgresError.self) { try db.queryOne("SELECT $1::int", [1]) }
            #expect(lost?.isConnectionLost == true)
            #expect(db.reconnectIfNeeded())
            #expect(try db.queryOne("SELECT $1::int", [2])?[0].int == 2)
            try other.notify(channel, payload: "again")
            let deadline = Date().addingTimeInterval(5)
            var received: [(channel: String, payload: String)] = []
            while received.isEmpty, Date() < deadline {
                var descriptor = pollfd(fd: db.socket, events: Int16(POLLIN), revents: 0)
                _ = poll(&descriptor, 1, 1_000)
                received += try db.notifications()
            }
            #expect(received.map(\.payload) == ["again"])
        }
    }

    @Test("a sequence row counts up by one, gives a number back when its transaction rolls back, and makes a second writer wait")
    func sequenceRow() throws {
        try TestServer.withScratch { db, schema in
            let table = "\(schema).stream"
            try db.execute("CREATE TABLE \(table) (id INTEGER PRIMARY KEY CHECK (id = 1), sequence BIGINT NOT NULL); INSERT INTO \(table) VALUES (1, 0)")
            #expect(try db.sequence(in: table) == 0)
            #expect(try db.nextSequence(in: table) == 1)
            #expect(throws: PostgresError.self) {
                try db.transaction {
                    #expect(try db.nextSequence(in: table) == 2)
                    throw PostgresError(message: "roll back", operation: "test")
                }
            }
            #expect(try db.sequence(in: table) == 1)
            let other = try TestServer.connect(schema: schema)
            defer { other.close() }
            try other.execute("SET lock_timeout = '100ms'")
            try db.transaction { () throws -> Void in
                #expect(try db.nextSequence(in: table) == 2)
                let waited = #expect(throws: PostgresError.self) { try other.nextSequence(in: table) }
                #expect(waited?.sqlState == "55P03")
            }
            #expect(try other.nextSequence(in: table) == 3)
        }
    }

    @Test("pollNotifications says when notices came, and when a listener whose server ended it is back")
    func pollNotifications() throws {
        try TestServer.withScratch { listener, schema in
            let channel = "poll \(schema)"
            try listener.listen(channel)
            #expect(!listener.pollNotifications())
            let other = try TestServer.connect(schema: schema)
            defer { other.close() }
            func told() -> Bool {
                let deadline = Date().addingTimeInterval(5)
                while Date() < deadline {
                    if listener.pollNotifications() { return true }
                    Thread.sleep(forTimeInterval: 0.02)
                }
                return false
            }
            try other.notify(channel, payload: "one")
            #expect(told())
            #expect(!listener.pollNotifications())
            let pid = try #require(try listener.queryOne("SELECT pg_backend_pid()")?[0].int)
            #expect(try other.queryOne("SELECT pg_terminate_backend($1)", [pid])?[0].bool == true)
            #expect(told(), "back after the server ended the session")
            try other.notify(channel, payload: "two")
            #expect(told(), "listening again")
        }
    }

    /// Notices from other processes stop for good when a reconnected listener forgets a channel:
    /// the listener is not back until it listens again, says why once, and tries at every poll.
    @Test("a listener that cannot listen again after a reconnect says so once, is not back until it can, and tries each poll")
    func listenAgainFails() throws {
        try TestServer.withScratch { listener, schema in
            let channel = "again \(schema)"
            var reports: [PostgresError?] = []
            listener.onListenChange = { reports.append($0) }
            try listener.listen(channel)
            let other = try TestServer.connect(schema: schema)
            defer { other.close() }
            let pid = try #require(try listener.queryOne("SELECT pg_backend_pid()")?[0].int)
            listener.listenCommand = "LISTEN_REFUSED"
            #expect(try other.queryOne("SELECT pg_terminate_backend($1)", [pid])?[0].bool == true)
            let deadline = Date().addingTimeInterval(5)
            while listener.listenFailure == nil, Date() < deadline {
                #expect(!listener.pollNotifications())
                Thread.sleep(forTimeInterval: 0.02)
            }
            #expect(listener.listenFailure?.message.contains("LISTEN_REFUSED") == true)
            #expect(!listener.pollNotifications() && !listener.reconnectIfNeeded(), "not back while a channel is not listened on")
            #expect(reports.count == 1 && reports.first??.sqlState == "42601", "told once, not at every try")
            listener.listenCommand = "LISTEN"
            #expect(listener.pollNotifications(), "listening again: what was sent meanwhile is read")
            #expect(listener.listenFailure == nil && reports.count == 2 && reports.last! == nil)
            try other.notify(channel, payload: "heard")
            var received: [(channel: String, payload: String)] = []
            while received.isEmpty, Date() < deadline.addingTimeInterval(5) {
                received += try listener.notifications()
                Thread.sleep(forTimeInterval: 0.02)
            }
            #expect(received.map(\.payload) == ["heard"])
        }
    }

    @Test("a closed connection refuses every call and does not reconnect")
    func closedConnection() throws {
        let closed = try TestServer.connect(schema: "public")
        closed.close()
        let error = #expect(throws: PostgresError.self) { try closed.query("SELECT 1") }
        #expect(error?.message.contains("closed") == true)
        #expect(!closed.reconnectIfNeeded())
    }
}

/// Errors that need no server.
@Suite("PostgreSQL connection errors")
struct PostgresConnectionErrorTests {
    @Test("a URL that is not PostgreSQL's, and a server that is not there, give clear errors")
    func badTargets() throws {
        let scheme = #expect(throws: PostgresError.self) { try PostgresConnection(url: "mysql://nh@localhost/nh") }
        #expect(scheme?.message.contains("postgresql://") == true)
        #expect(scheme?.message.contains("mysql://") == true)

        let refused = #expect(throws: PostgresError.self) {
            try PostgresConnection(url: "postgresql://nh@127.0.0.1:1/nh_elsewhere")
        }
        #expect(refused?.sqlState == "08001")
        #expect(refused?.isConnectionLost == true)
        #expect(refused?.description.contains("127.0.0.1:1") == true)
        #expect(refused?.description.contains("nh_elsewhere") == true)
        #expect(refused?.message.contains("\n") == false)

        let noSocket = #expect(throws: PostgresError.self) {
            try PostgresConnection(url: "postgresql:///nh?host=/nonexistent/nh-socket&port=5999&user=nh")
        }
        #expect(noSocket?.description.contains("/nonexistent/nh-socket") == true)
    }
}
