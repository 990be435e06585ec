import Foundation
import HubProtocol

/// A value read back from a database, whichever the engine, so that a store with two engines
/// can decode its rows in one place. Each reading is nil for NULL and for a value of another type.
public protocol StoredValue {
    var isNull: Bool { get }
    var int64: Int64? { get }
    var double: Double? { get }
    var string: String? { get }
    var data: Data? { get }
}

/// A result row, whichever the engine, read by column name (`string(_:of:)` and the others): a
/// column the statement did not return, NULL where a value is required, or a value of another
/// type throws an `internal` `HubError` naming the table and the column, rather than read as a
/// made-up value.
public protocol StoredRow {
    associatedtype Value: StoredValue
    /// The statement's column names, in order; the rows of one statement share one array.
    var columns: [String] { get }
    /// By index; past the end reads as NULL.
    subscript(_ column: Int) -> Value { get }
}

extension StoredValue {
    public var int: Int? { int64.map { Int($0) } }
}

extension StoredRow {
    /// The value of `column`, NULL or not; throws when the statement returned no such column.
    @inlinable
    public func value(_ column: String, of table: String) throws(HubError) -> Value {
        // A statement returns a handful of columns: a scan of the shared names beats hashing.
        let names = columns
        var index = 0
        while index < names.count {
            if names[index] == column { return self[index] }
            index += 1
        }
        throw StoredRowError.missing(column, of: table, among: names)
    }

    /// `column` read by `read`, nil for NULL; throws when there is no such column or `read` finds
    /// a value of another type than `type`.
    @inlinable
    func optional<T>(_ column: String, _ table: String, _ type: String, _ read: (Value) -> T?) throws(HubError) -> T? {
        let value = try value(column, of: table)
        if value.isNull { return nil }
        guard let result = read(value) else { throw StoredRowError.wrongType(column, of: table, expected: type) }
        return result
    }

    @inlinable
    func required<T>(_ column: String, _ table: String, _ type: String, _ read: (Value) -> T?) throws(HubError) -> T {
        guard let result = try optional(column, table, type, read) else { throw StoredRowError.null(column, of: table, expected: type) }
        return result
    }

    @inlinable
    public func string(_ column: String, of table: String) throws(HubError) -> String { try required(column, table, "text", { $0.string }) }
    @inlinable
    public func optionalString(_ column: String, of table: String) throws(HubError) -> String? { try optional(column, table, "text", { $0.string }) }

    /// A value kept as its raw text, such as a state's name; text that names none is of another type.
    @inlinable
    public func string<T: RawRepresentable>(_ column: String, of table: String, as type: T.Type) throws(HubError) -> T
    where T.RawValue == String {
        try required(column, table, "a \(T.self)", { $0.string.flatMap(T.init(rawValue:)) })
    }

    @inlinable
    public func int(_ column: String, of table: String) throws(HubError) -> Int { try required(column, table, "an integer", { $0.int }) }
    @inlinable
    public func optionalInt(_ column: String, of table: String) throws(HubError) -> Int? { try optional(column, table, "an integer", { $0.int }) }

    @inlinable
    public func int64(_ column: String, of table: String) throws(HubError) -> Int64 { try required(column, table, "an integer", { $0.int64 }) }
    @inlinable
    public func optionalInt64(_ column: String, of table: String) throws(HubError) -> Int64? {
        try optional(column, table, "an integer", { $0.int64 })
    }

    /// A sequence number: an integer that is not negative.
    @inlinable
    public func sequence(_ column: String, of table: String) throws(HubError) -> UInt64 {
        try required(column, table, "a sequence number", { $0.int64.flatMap(UInt64.init(exactly:)) })
    }

    @inlinable
    public func optionalDouble(_ column: String, of table: String) throws(HubError) -> Double? { try optional(column, table, "a number", { $0.double }) }

    /// A time kept as seconds since 1970, as `Date` binds on both engines.
    @inlinable
    public func date(_ column: String, of table: String) throws(HubError) -> Date {
        Date(timeIntervalSince1970: try required(column, table, "a time", { $0.double }))
    }
    @inlinable
    public func optionalDate(_ column: String, of table: String) throws(HubError) -> Date? {
        try optional(column, table, "a time", { $0.double }).map { Date(timeIntervalSince1970: $0) }
    }

    @inlinable
    public func data(_ column: String, of table: String) throws(HubError) -> Data { try required(column, table, "a byte string", { $0.data }) }
    @inlinable
    public func optionalData(_ column: String, of table: String) throws(HubError) -> Data? { try optional(column, table, "a byte string", { $0.data }) }

    /// A flag: an integer (0 is false) on SQLite, a boolean on PostgreSQL.
    @inlinable
    public func bool(_ column: String, of table: String) throws(HubError) -> Bool {
        try required(column, table, "a flag", { $0.int64.map { $0 != 0 } })
    }
}

/// The errors of a row that does not read as its store expects: the store holds what this build
/// cannot make sense of, which retrying will not mend.
@usableFromInline
enum StoredRowError {
    @usableFromInline
    static func missing(_ column: String, of table: String, among names: [String]) -> HubError {
        HubError(.internal, "\(table).\(column) cannot be read: the statement returned no such column (it returned \(names.joined(separator: ", ")))")
    }

    @usableFromInline
    static func null(_ column: String, of table: String, expected type: String) -> HubError {
        HubError(.internal, "\(table).\(column) cannot be read: it is NULL where \(type) is required")
    }

    @usableFromInline
    static func wrongType(_ column: String, of table: String, expected type: String) -> HubError {
        HubError(.internal, "\(table).\(column) cannot be read: it holds a value that is not \(type)")
    }
}

extension SQLiteValue: StoredValue {}
extension Row: StoredRow {}
