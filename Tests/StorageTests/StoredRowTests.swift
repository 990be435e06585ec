import Foundation
import HubProtocol
import Storage
import Testing

@Suite("SQLite rows read by column name")
struct StoredRowTests {
    enum Shade: String { case light, dark }

    func database() throws -> SQLiteDatabase {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-rows-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let database = try SQLiteDatabase(path: folder.appendingPathComponent("rows.db").path)
        try database.execute("""
            CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, at REAL, body BLOB, flag INTEGER, shade TEXT);
            INSERT INTO items VALUES (7, 'seven', 1700000000.5, x'0001', 1, 'dark');
            INSERT INTO items VALUES (-1, NULL, NULL, NULL, 0, 'dim');
            """)
        return database
    }

    /// The error a read throws: an internal one that names the table and the column.
    func failure(_ read: () throws -> Void) -> HubError? {
        let error = #expect(throws: HubError.self) { try read() }
        #expect(error?.code == .internal)
        return error
    }

    @Test("each accessor reads its column by name, whatever the column's place in the statement")
    func happyPath() throws {
        let row = try #require(try database().queryOne("SELECT shade, flag, body, at, name, id FROM items WHERE id = 7"))
        #expect(try row.string("name", of: "items") == "seven")
        #expect(try row.optionalString("name", of: "items") == "seven")
        #expect(try row.int("id", of: "items") == 7)
        #expect(try row.int64("id", of: "items") == 7)
        #expect(try row.sequence("id", of: "items") == 7)
        #expect(try row.double("at", of: "items") == 1_700_000_000.5)
        #expect(try row.date("at", of: "items") == Date(timeIntervalSince1970: 1_700_000_000.5))
        #expect(try row.data("body", of: "items") == Data([0, 1]))
        #expect(try row.bool("flag", of: "items"))
        #expect(try row.string("shade", of: "items", as: Shade.self) == .dark)
    }

    @Test("a nullable column reads as nil through the optional accessors")
    func optionals() throws {
        let row = try #require(try database().queryOne("SELECT name, at, body, id FROM items WHERE id = -1"))
        #expect(try row.optionalString("name", of: "items") == nil)
        #expect(try row.optionalDate("at", of: "items") == nil)
        #expect(try row.optionalData("body", of: "items") == nil)
        #expect(try row.optionalInt("id", of: "items") == -1)
        #expect(try row.optionalInt64("id", of: "items") == -1)
    }

    @Test("a column the statement did not return throws, naming the table, the column and what it returned")
    func missingColumn() throws {
        let row = try #require(try database().queryOne("SELECT id, name FROM items WHERE id = 7"))
        let error = failure { _ = try row.string("title", of: "items") }
        #expect(error?.message.contains("items.title") == true)
        #expect(error?.message.contains("id, name") == true)
    }

    @Test("NULL where a value is required throws rather than read as a default")
    func nullRequired() throws {
        let row = try #require(try database().queryOne("SELECT name, at, body FROM items WHERE id = -1"))
        #expect(failure { _ = try row.string("name", of: "items") }?.message.contains("items.name") == true)
        #expect(failure { _ = try row.date("at", of: "items") }?.message.contains("NULL") == true)
        #expect(failure { _ = try row.data("body", of: "items") }?.message.contains("items.body") == true)
    }

    @Test("a value of another type throws: text for a number, a negative sequence, text that names no case")
    func wrongType() throws {
        let database = try database()
        let seven = try #require(try database.queryOne("SELECT id, name FROM items WHERE id = 7"))
        #expect(failure { _ = try seven.int("name", of: "items") }?.message.contains("not an integer") == true)
        #expect(failure { _ = try seven.optionalDouble("name", of: "items") }?.message.contains("items.name") == true)
        #expect(failure { _ = try seven.string("id", of: "items") }?.message.contains("not text") == true)
        let dim = try #require(try database.queryOne("SELECT id, shade FROM items WHERE id = -1"))
        #expect(failure { _ = try dim.sequence("id", of: "items") }?.message.contains("items.id") == true)
        #expect(failure { _ = try dim.string("shade", of: "items", as: Shade.self) }?.message.contains("items.shade") == true)
    }

    @Test("an aliased aggregate reads by its alias")
    func aggregate() throws {
        let row = try #require(try database().queryOne("SELECT count(*) AS n, max(id) AS top FROM items"))
        #expect(try row.int("n", of: "items") == 2)
        #expect(try row.int("top", of: "items") == 7)
    }

    /// The dispatcher reads thousands of rows a turn: the names are read once per statement, not per row.
    @Test("the rows of a statement share one array of column names, across runs of the statement")
    func sharedNames() throws {
        let database = try database()
        let sql = "SELECT id, name FROM items ORDER BY id"
        let first = try database.query(sql)
        let again = try database.query(sql)
        #expect(first.count == 2)
        let storage = (first + again).map { $0.columns.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) } }
        #expect(Set(storage).count == 1)
        #expect(first[0].columns == ["id", "name"])
    }
}
