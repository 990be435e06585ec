import CSQLite
import Foundation
import Storage
import Synchronization
import Testing

@Suite("SQLite store")
struct SQLiteDatabaseTests {
    static let migrations = [
        Migration(version: 1, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"),
        Migration(version: 2, "ALTER TABLE items ADD COLUMN payload BLOB; CREATE INDEX items_by_name ON items(name);"),
    ]

    func temporaryPath() -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-storage-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder.appendingPathComponent("test.db").path
    }

    @Test("migrations run from empty, in order, and set the schema version; WAL is on")
    func migrateFromEmpty() throws {
        let database = try SQLiteDatabase(path: temporaryPath())
        #expect(try database.schemaVersion == 0)
        try database.migrate(Self.migrations)
        #expect(try database.schemaVersion == 2)
        #expect(try database.queryOne("PRAGMA journal_mode")?[0].string == "wal")
        try database.run("INSERT INTO items (name, payload) VALUES (?, ?)", ["a", Data([1, 2, 3])])
        let row = try database.queryOne("SELECT name, payload FROM items")
        #expect(row?[0].string == "a")
        #expect(row?[1].data == Data([1, 2, 3]))
    }

    /// Another process (a command beside the running service, say) writing to a store not yet in
    /// WAL mode: SQLite answers the switch to WAL with SQLITE_BUSY at once, without its busy
    /// handler, so opening waits and tries again within the busy timeout.
    @Test("opening waits out another connection writing to a store not yet in WAL mode", arguments: [false, true])
    func openBesideAWriter(committedBefore: Bool) throws {
        let path = temporaryPath()
        var other: OpaquePointer?
        #expect(sqlite3_open(path, &other) == SQLITE_OK)
        defer { sqlite3_close(other) }
        if committedBefore { #expect(sqlite3_exec(other, "CREATE TABLE earlier (x)", nil, nil, nil) == SQLITE_OK) }
        #expect(sqlite3_exec(other, "BEGIN IMMEDIATE; CREATE TABLE theirs (x);", nil, nil, nil) == SQLITE_OK)
        // The writer commits on its own thread 300 ms on; the semaphore orders its result before the read.
        nonisolated(unsafe) let writing = other
        nonisolated(unsafe) var committed = SQLITE_ERROR
        let writerDone = DispatchSemaphore(value: 0)
        Thread {
            Thread.sleep(forTimeInterval: 0.3)
            committed = sqlite3_exec(writing, "COMMIT", nil, nil, nil)
            writerDone.signal()
        }.start()
        let database = try SQLiteDatabase(path: path)
        writerDone.wait()
        #expect(committed == SQLITE_OK)
        #expect(try database.queryOne("PRAGMA journal_mode")?[0].string == "wal")
        #expect(try database.queryOne("SELECT count(*) FROM sqlite_master WHERE name = 'theirs'")?[0].int == 1)

        // A writer that holds on past the busy timeout is reported, not waited for without end.
        let stuck = temporaryPath()
        var holder: OpaquePointer?
        #expect(sqlite3_open(stuck, &holder) == SQLITE_OK)
        defer { sqlite3_close(holder) }
        #expect(sqlite3_exec(holder, "BEGIN IMMEDIATE; CREATE TABLE theirs (x);", nil, nil, nil) == SQLITE_OK)
        #expect(throws: StorageError.self) { _ = try SQLiteDatabase(path: stuck, options: .init(busyTimeout: 200)) }
        sqlite3_exec(holder, "ROLLBACK", nil, nil, nil)
    }

    @Test("reopening keeps the data and runs only the new migrations")
    func reopen() throws {
        let path = temporaryPath()
        do {
            let database = try SQLiteDatabase(path: path)
            try database.migrate(Array(Self.migrations.prefix(1)))
            try database.run("INSERT INTO items (name) VALUES (?)", ["kept"])
            database.close()
        }
        let database = try SQLiteDatabase(path: path)
        #expect(try database.schemaVersion == 1)
        try database.migrate(Self.migrations)
        try database.migrate(Self.migrations)
        #expect(try database.schemaVersion == 2)
        #expect(try database.query("SELECT name FROM items").map { $0[0].string } == ["kept"])
    }

    @Test("a database newer than the code is refused")
    func newerSchema() throws {
        let database = try SQLiteDatabase(path: temporaryPath())
        try database.migrate(Self.migrations)
        #expect(throws: StorageError.self) { try database.migrate(Array(Self.migrations.prefix(1))) }
    }

    @Test("a failing migration leaves the schema where it was")
    func failingMigration() throws {
        let database = try SQLiteDatabase(path: temporaryPath())
        try database.migrate(Array(Self.migrations.prefix(1)))
        #expect(throws: StorageError.self) {
            try database.migrate([Self.migrations[0], Migration(version: 2, "CREATE TABLE ok (x); THIS IS NOT SQL;")])
        }
        #expect(try database.schemaVersion == 1)
        #expect(try database.query("SELECT name FROM sqlite_master WHERE name = 'ok'").isEmpty)
    }

    @Test("a transaction that throws is rolled back; a nested one rolls back alone")
    func transactions() throws {
        let database = try SQLiteDatabase(path: temporaryPath())
        try database.migrate(Self.migrations)
        struct Boom: Error {}
        #expect(throws: Boom.self) {
            try database.transaction {
                try database.run("INSERT INTO items (name) VALUES ('lost')")
                throw Boom()
            }
        }
        try database.transaction {
            try database.run("INSERT INTO items (name) VALUES ('outer')")
            try? database.transaction {
                try database.run("INSERT INTO items (name) VALUES ('inner')")
                throw Boom()
            }
        }
        #expect(try database.query("SELECT name FROM items ORDER BY name").map { $0[0].string } == ["outer"])
        #expect(!database.isInTransaction)
    }

    @Test("once SQLite has rolled a transaction back, neither a statement nor a nested transaction runs on its own")
    func nothingAfterARollBack() throws {
        let database = try SQLiteDatabase(path: temporaryPath())
        try database.migrate(Self.migrations)
        #expect(throws: StorageError.self) {
            try database.transaction {
                try database.run("INSERT INTO items (name) VALUES ('first')")
                // What SQLite does by itself on some errors, such as a full disk.
                try database.execute("ROLLBACK")
                var nested: StorageError?
                do {
                    _ = try database.transaction { try database.run("INSERT INTO items (name) VALUES ('nested')") }
                } catch {
                    nested = error as? StorageError
                }
                #expect(nested?.code == SQLITE_ABORT)
                try database.run("INSERT INTO items (name) VALUES ('after')")
            }
        }
        #expect(try database.query("SELECT name FROM items").isEmpty)
        #expect(!database.isInTransaction)
    }

    @Test("constraint violations are typed, and wrong parameter counts are caught")
    func errors() throws {
        let database = try SQLiteDatabase(path: temporaryPath())
        try database.migrate(Self.migrations)
        try database.run("INSERT INTO items (name) VALUES (?)", ["x"])
        do {
            try database.run("INSERT INTO items (name) VALUES (?)", ["x"])
            Issue.record("duplicate should fail")
        } catch {
            #expect(error.isConstraintViolation)
        }
        #expect(throws: StorageError.self) { try database.run("INSERT INTO items (name) VALUES (?)", []) }
        #expect(throws: StorageError.self) { try database.run("SELECT * FROM nowhere") }
        // The statement cache still works after the failures.
        #expect(try database.queryOne("SELECT count(*) FROM items")?[0].int == 1)
    }

    @Test("readers on their own connections run beside a writer and see only committed rows")
    func concurrentReaders() throws {
        let path = temporaryPath()
        let writer = try SQLiteDatabase(path: path)
        try writer.migrate(Self.migrations)
        let rows = 300
        let failures = Mutex<[String]>([])
        let observed = Mutex<[Int]>([])
        let writerDone = Atomic<Bool>(false)
        let group = DispatchGroup()
        for reader in 0..<3 {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    let database = try SQLiteDatabase(path: path)
                    var last = 0
                    // Read until the writer is done, then once more; the deadline only guards a hang.
                    let deadline = Date().addingTimeInterval(60)
                    var finalRead = false
                    while !finalRead && Date() < deadline {
                        finalRead = writerDone.load(ordering: .acquiring)
                        // Rows go in pairs in one transaction, so a reader never sees an odd count.
                        let count = try database.queryOne("SELECT count(*) FROM items")?[0].int ?? -1
                        if count < last || count % 2 != 0 {
                            failures.withLock { $0.append("reader \(reader) saw \(count) after \(last)") }
                        }
                        last = count
                    }
                    observed.withLock { $0.append(last) }
                } catch {
                    failures.withLock { $0.append("reader \(reader): \(error)") }
                }
            }.start()
        }
        for index in stride(from: 0, to: rows, by: 2) {
            try writer.transaction {
                try writer.run("INSERT INTO items (name) VALUES (?)", ["n\(index)"])
                try writer.run("INSERT INTO items (name) VALUES (?)", ["n\(index + 1)"])
            }
        }
        writerDone.store(true, ordering: .releasing)
        group.wait()
        #expect(failures.withLock { $0 }.isEmpty)
        #expect(observed.withLock { $0 } == [rows, rows, rows])
    }

    @Test("a group of writes is seen by its own connection at once and by others after commitGroup; a failing write inside it undoes only itself")
    func groupCommit() throws {
        let path = temporaryPath()
        let writer = try SQLiteDatabase(path: path)
        try writer.migrate(Self.migrations)
        let reader = try SQLiteDatabase(path: path)
        try writer.beginGroup()
        try writer.transaction { try writer.run("INSERT INTO items (name) VALUES (?)", ["first"]) }
        #expect(throws: StorageError.self) {
            try writer.transaction {
                try writer.run("INSERT INTO items (name) VALUES (?)", ["second"])
                try writer.run("INSERT INTO items (name) VALUES (?)", ["first"])
            }
        }
        try writer.beginGroup()
        #expect(try writer.query("SELECT name FROM items ORDER BY id").compactMap { $0[0].string } == ["first"])
        #expect(try reader.queryOne("SELECT count(*) FROM items")?[0].int == 0)
        try writer.commitGroup()
        #expect(try reader.query("SELECT name FROM items").compactMap { $0[0].string } == ["first"])
        // With no group open, a transaction commits on its own as before.
        try writer.commitGroup()
        try writer.transaction { try writer.run("INSERT INTO items (name) VALUES (?)", ["third"]) }
        #expect(try reader.queryOne("SELECT count(*) FROM items")?[0].int == 2)
    }

    @Test("the background checkpointer copies the log into the database file; the writer's own checkpoint waits for a long log")
    func backgroundCheckpoint() throws {
        let path = temporaryPath()
        let writer = try SQLiteDatabase(path: path)
        try writer.migrate(Self.migrations)
        let checkpointer = try BackgroundCheckpointer(for: writer, interval: 0.05)
        defer { checkpointer.stop() }
        #expect(try writer.queryOne("PRAGMA wal_autocheckpoint")?[0].int == BackgroundCheckpointer.restartPages)
        try writer.run("INSERT INTO items (name, payload) VALUES (?, ?)", ["big", Data(repeating: 7, count: 1 << 20)])
        func fileSize() -> Int { ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0 }
        let deadline = Date().addingTimeInterval(10)
        while fileSize() < 1 << 20 && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        #expect(fileSize() >= 1 << 20, "the megabyte reached the database file")
    }

    @Test("a writer whose groups follow each other with no pause still has its log start over, not grow without end")
    func logStartsOver() throws {
        let path = temporaryPath()
        let writer = try SQLiteDatabase(path: path)
        try writer.migrate(Self.migrations)
        let checkpointer = try BackgroundCheckpointer(for: writer, interval: 0.05)
        defer { checkpointer.stop() }
        func logSize() -> Int { ((try? FileManager.default.attributesOfItem(atPath: path + "-wal"))?[.size] as? Int) ?? 0 }
        // 400 groups of 16 KiB each, every one opened as soon as the last committed: 6.4 MB in all,
        // more than the log may hold before it starts over (restartPages of 4 KiB).
        let row = Data(repeating: 1, count: 16 << 10)
        var largest = 0
        try writer.beginGroup()
        for index in 0..<400 {
            try writer.transaction { try writer.run("INSERT INTO items (name, payload) VALUES (?, ?)", ["g\(index)", row]) }
            try writer.commitGroup()
            try writer.beginGroup()
            largest = max(largest, logSize())
        }
        try writer.commitGroup()
        #expect(try writer.queryOne("SELECT count(*) FROM items")?[0].int == 400)
        let limit = (BackgroundCheckpointer.restartPages + 64) * 4_120
        #expect(largest <= limit, "the log reached \(largest) bytes; it starts over at about \(limit)")
    }
}
