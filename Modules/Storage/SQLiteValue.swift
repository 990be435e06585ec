import Foundation

/// A value that goes into or comes out of an SQLite column.
public enum SQLiteValue: Sendable, Equatable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob(Data)

    public var int64: Int64? {
        switch self {
        case .integer(let value): return value
        case .real(let value): return Int64(value)
        default: return nil
        }
    }

    public var int: Int? { int64.map { Int($0) } }

    public var double: Double? {
        switch self {
        case .integer(let value): return Double(value)
        case .real(let value): return value
        default: return nil
        }
    }

    public var string: String? {
        switch self {
        case .text(let value): return value
        case .blob(let value): return String(data: value, encoding: .utf8)
        default: return nil
        }
    }

    public var data: Data? {
        switch self {
        case .blob(let value): return value
        case .text(let value): return Data(value.utf8)
        default: return nil
        }
    }

    public var isNull: Bool { self == .null }
}

/// Types that bind to a statement parameter.
public protocol SQLiteBindable {
    var sqliteValue: SQLiteValue { get }
}

extension Int: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(Int64(self)) } }
extension Int64: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(self) } }
extension UInt64: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(Int64(bitPattern: self)) } }
extension Int32: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(Int64(self)) } }
extension Double: SQLiteBindable { public var sqliteValue: SQLiteValue { .real(self) } }
extension Bool: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(self ? 1 : 0) } }
extension String: SQLiteBindable { public var sqliteValue: SQLiteValue { .text(self) } }
extension Data: SQLiteBindable { public var sqliteValue: SQLiteValue { .blob(self) } }
/// A date binds as seconds since 1970, in a REAL (as the PostgreSQL stores keep it in a double precision).
extension Date: SQLiteBindable { public var sqliteValue: SQLiteValue { .real(timeIntervalSince1970) } }
extension SQLiteValue: SQLiteBindable { public var sqliteValue: SQLiteValue { self } }
extension Optional: SQLiteBindable where Wrapped: SQLiteBindable {
    public var sqliteValue: SQLiteValue { self?.sqliteValue ?? .null }
}
