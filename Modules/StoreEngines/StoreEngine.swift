import Foundation
import HubProtocol
import Postgres
import Storage

/// A value both engines bind.
public typealias StoreValue = SQLiteBindable & PostgresBindable

/// One interface over the two engines a store keeps its tables on, SQLite and PostgreSQL, so that a
/// store's behaviour is written once over a table of each engine's statements.
public protocol StoreEngine {
    associatedtype Row: StoredRow
    /// Runs `body` in a transaction; nested, in a savepoint.
    func transaction<T>(_ body: () throws -> T) throws -> T
    /// Runs a statement; returns its rows.
    func query(_ sql: String, _ values: [(any StoreValue)?]) throws -> [Row]
    /// Runs a statement; returns how many rows it inserted, changed or deleted.
    @discardableResult
    func run(_ sql: String, _ values: [(any StoreValue)?]) throws -> Int
    /// Runs `body` reading one point in time, whatever other writers commit meanwhile.
    func snapshot<T>(_ body: () throws -> T) throws -> T
}

/// A store whose statements go to one engine, `engine`.
public protocol EngineBacked: StoreEngine {
    associatedtype Engine: StoreEngine where Engine.Row == Row
    var engine: Engine { get }
}

extension EngineBacked {
    public func transaction<T>(_ body: () throws -> T) throws -> T { try engine.transaction(body) }
    public func query(_ sql: String, _ values: [(any StoreValue)?]) throws -> [Row] { try engine.query(sql, values) }
    @discardableResult
    public func run(_ sql: String, _ values: [(any StoreValue)?]) throws -> Int { try engine.run(sql, values) }
    public func snapshot<T>(_ body: () throws -> T) throws -> T { try engine.snapshot(body) }
}

extension StoreEngine {
    /// The statement's first row, if any.
    public func one(_ sql: String, _ values: [(any StoreValue)?] = []) throws -> Row? { try query(sql, values).first }

    /// The first row of a statement that always returns one, such as an aggregate or a counter's row.
    public func oneRow(_ sql: String, _ values: [(any StoreValue)?] = []) throws -> Row {
        guard let row = try one(sql, values) else { throw HubError(.internal, "the statement returned no row: \(sql)") }
        return row
    }
}

/// SQL written once with PostgreSQL's numbered parameters (`$1`, a number used as often as
/// needed), and its text for SQLite, whose `?1` means the same.
public enum NumberedParameters {
    public static func sqlite(_ sql: String) -> String {
        var result = ""
        result.reserveCapacity(sql.utf8.count)
        var previous: Character?
        for character in sql {
            if previous == "$", character.isASCII, character.isNumber { result.removeLast(); result.append("?") }
            result.append(character)
            previous = character
        }
        return result
    }
}

/// SQLite as a store engine.
public struct SQLiteEngine: StoreEngine {
    public let database: SQLiteDatabase
    public init(_ database: SQLiteDatabase) { self.database = database }

    public func transaction<T>(_ body: () throws -> T) throws -> T { try database.transaction(body) }
    /// A transaction: SQLite has one writer at a time, and a reader in a transaction sees none of it.
    public func snapshot<T>(_ body: () throws -> T) throws -> T { try database.transaction(body) }

    public func query(_ sql: String, _ values: [(any StoreValue)?]) throws -> [Storage.Row] {
        try database.query(sql, values.map { $0?.sqliteValue ?? .null })
    }

    @discardableResult
    public func run(_ sql: String, _ values: [(any StoreValue)?]) throws -> Int {
        try database.run(sql, values.map { $0?.sqliteValue ?? .null })
    }
}

/// PostgreSQL as a store engine: a connection found broken is reset before a statement that is not
/// inside a transaction.
public struct PostgresEngine: StoreEngine {
    public let connection: PostgresConnection
    public init(_ connection: PostgresConnection) { self.connection = connection }

    private var db: PostgresConnection {
        if !connection.isInTransaction { _ = connection.reconnectIfNeeded() }
        return connection
    }

    public func transaction<T>(_ body: () throws -> T) throws -> T { try db.transaction(body) }

    /// A read-only transaction at REPEATABLE READ.
    public func snapshot<T>(_ body: () throws -> T) throws -> T {
        try db.transaction {
            try connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return try body()
        }
    }

    public func query(_ sql: String, _ values: [(any StoreValue)?]) throws -> [PostgresRow] {
        try db.query(sql, values.map { $0 })
    }

    @discardableResult
    public func run(_ sql: String, _ values: [(any StoreValue)?]) throws -> Int {
        try db.run(sql, values.map { $0 })
    }
}
