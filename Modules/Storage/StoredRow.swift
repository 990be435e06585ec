import Foundation

/// A value read back from a database, whichever the engine, so that a store with two engines
/// can decode its rows in one place.
public protocol StoredValue {
    var int64: Int64? { get }
    var double: Double? { get }
    var string: String? { get }
    var data: Data? { get }
}

/// A result row, whichever the engine, read by column index; past the end reads as NULL.
public protocol StoredRow {
    associatedtype Value: StoredValue
    subscript(_ column: Int) -> Value { get }
}

extension StoredValue {
    /// A sequence number: a non-negative integer, 0 for NULL.
    public var sequence: UInt64 { UInt64(int64 ?? 0) }

    public var int: Int? { int64.map { Int($0) } }
}

extension SQLiteValue: StoredValue {}
extension Row: StoredRow {}
