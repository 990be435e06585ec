import Foundation
import HubProtocol
import Postgres
import Storage
import TestSupport
import Testing

@Suite(
    "PostgreSQL rows read by column name",
    .enabled(
        if: TestServer.url != nil,
        "NH_TEST_POSTGRES is not set: run `python3 Tests/Support/pgserver.py run -- swift test` for the PostgreSQL tests"))
struct PostgresRowTests {
    /// Runs `body` with a table `items` of one full row (id 7) and one mostly NULL (id -1).
    func withItems(_ body: (PostgresConnection) throws -> Void) throws {
        try TestServer.withScratch { db, _ in
            try db.execute("""
                CREATE TABLE items (
                    id bigint PRIMARY KEY, name text, at double precision, body bytea, flag boolean, shade text, version integer);
                INSERT INTO items VALUES (7, 'seven', 1700000000.5, '\\x0001', true, 'dark', 3);
                INSERT INTO items VALUES (-1, NULL, NULL, NULL, false, 'dim', NULL);
                """)
            try body(db)
        }
    }

    @Test("each accessor reads its column by name: bigint, integer, double precision, bytea, boolean, text")
    func happyPath() throws {
        try withItems { db in
            let row = try #require(try db.queryOne("SELECT version, shade, flag, body, at, name, id FROM items WHERE id = 7"))
            #expect(try StoredItem(row) == .seven)
            #expect(try row.int("version", of: "items") == 3)
        }
    }

    @Test("a nullable column reads as nil through the optional accessors; false reads as false")
    func optionals() throws {
        try withItems { db in
            let row = try #require(try db.queryOne("SELECT name, at, body, version, flag FROM items WHERE id = -1"))
            #expect(try row.optionalString("name", of: "items") == nil)
            #expect(try row.optionalDate("at", of: "items") == nil)
            #expect(try row.optionalData("body", of: "items") == nil)
            #expect(try row.optionalInt("version", of: "items") == nil)
            #expect(try !row.bool("flag", of: "items"))
        }
    }

    @Test("a column the statement did not return throws, naming the table and the column")
    func missingColumn() throws {
        try withItems { db in
            let row = try #require(try db.queryOne("SELECT id, name FROM items WHERE id = 7"))
            let message = internalErrorMessage { _ = try row.string("title", of: "items") }
            #expect(message?.contains("items.title") == true)
            #expect(message?.contains("id, name") == true)
        }
    }

    @Test("NULL where a value is required, or a value of another type (text for a number, a negative sequence, text that names no case), throws")
    func unreadable() throws {
        try withItems { db in
            let dim = try #require(try db.queryOne("SELECT id, name, at, version, shade FROM items WHERE id = -1"))
            #expect(internalErrorMessage { _ = try dim.string("name", of: "items") }?.contains("items.name") == true)
            #expect(internalErrorMessage { _ = try dim.date("at", of: "items") }?.contains("NULL") == true)
            #expect(internalErrorMessage { _ = try dim.int("version", of: "items") }?.contains("items.version") == true)
            #expect(internalErrorMessage { _ = try dim.sequence("id", of: "items") }?.contains("items.id") == true)
            #expect(internalErrorMessage { _ = try dim.string("shade", of: "items", as: StoredItem.Shade.self) }?.contains("items.shade") == true)
            let seven = try #require(try db.queryOne("SELECT name FROM items WHERE id = 7"))
            #expect(internalErrorMessage { _ = try seven.int64("name", of: "items") }?.contains("not an integer") == true)
            #expect(internalErrorMessage { _ = try seven.date("name", of: "items") }?.contains("items.name") == true)
        }
    }

    @Test("an aliased aggregate reads by its alias, through queryRow, which refuses a statement with no row")
    func aggregate() throws {
        try withItems { db in
            let count = try db.queryRow("SELECT count(*) AS n FROM items") { row throws(HubError) in try row.int("n", of: "items") }
            #expect(count == 2)
            let none = #expect(throws: PostgresError.self) {
                try db.queryRow("SELECT id FROM items WHERE id = 0") { row throws(HubError) in try row.int("id", of: "items") }
            }
            #expect(none?.message.contains("no row") == true)
            let unread = #expect(throws: PostgresError.self) {
                try db.queryRow("SELECT name FROM items WHERE id = -1") { row throws(HubError) in try row.string("name", of: "items") }
            }
            #expect(unread?.message.contains("items.name") == true)
        }
    }
}
