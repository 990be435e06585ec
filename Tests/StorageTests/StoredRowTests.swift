import Foundation
import HubProtocol
import Storage
import TestSupport
import Testing

@Suite("SQLite rows read by column name")
struct StoredRowTests {
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

    @Test("each accessor reads its column by name, whatever the column's place in the statement")
    func happyPath() throws {
        let row = try #require(try database().queryOne("SELECT shade, flag, body, at, name, id FROM items WHERE id = 7"))
        #expect(try StoredItem(row) == .seven)
        #expect(try row.optionalString("name", of: "items") == "seven")
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
        let message = internalErrorMessage { _ = try row.string("title", of: "items") }
        #expect(message?.contains("items.title") == true)
        #expect(message?.contains("id, name") == true)
    }

    @Test("NULL where a value is required, or a value of another type (text for a number, a negative sequence, text that names no case), throws")
    func unreadable() throws {
        let database = try database()
        let dim = try #require(try database.queryOne("SELECT id, name, at, body, shade FROM items WHERE id = -1"))
        #expect(internalErrorMessage { _ = try dim.string("name", of: "items") }?.contains("items.name") == true)
        #expect(internalErrorMessage { _ = try dim.date("at", of: "items") }?.contains("NULL") == true)
        #expect(internalErrorMessage { _ = try dim.data("body", of: "items") }?.contains("items.body") == true)
        #expect(internalErrorMessage { _ = try dim.sequence("id", of: "items") }?.contains("items.id") == true)
        #expect(internalErrorMessage { _ = try dim.string("shade", of: "items", as: StoredItem.Shade.self) }?.contains("items.shade") == true)
        let seven = try #require(try database.queryOne("SELECT id, name FROM items WHERE id = 7"))
        #expect(internalErrorMessage { _ = try seven.int("name", of: "items") }?.contains("not an integer") == true)
        #expect(internalErrorMessage { _ = try seven.optionalDouble("name", of: "items") }?.contains("items.name") == true)
        #expect(internalErrorMessage { _ = try seven.string("id", of: "items") }?.contains("not text") == true)
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
