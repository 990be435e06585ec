import Foundation
import HubProtocol
import Storage

/// How a parameter travels to the server: as text, which the server parses as the type the
/// statement expects, as the raw bytes of a bytea, or in the binary format of the type `oid`.
public enum PostgresValue: Sendable, Equatable, Hashable {
    case text(String)
    case bytea(Data)
    case binary(Data, oid: UInt32)

    /// A bytea[] parameter, in the array's binary format: one dimension from 1, each element its
    /// length then its bytes (big-endian), a nil element NULL.
    public static func byteaArray(_ elements: [Data?]) -> PostgresValue {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20 + elements.reduce(0) { $0 + 4 + ($1?.count ?? 0) })
        func put(_ value: Int32) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
        put(1)
        put(elements.contains(nil) ? 1 : 0)
        put(Int32(bitPattern: 17))
        put(Int32(elements.count))
        put(1)
        for element in elements {
            guard let element else {
                put(-1)
                continue
            }
            put(Int32(element.count))
            bytes.append(contentsOf: element)
        }
        return .binary(Data(bytes), oid: 1001)
    }

    /// An array parameter in text form, each element quoted and a nil element NULL, for a
    /// statement that casts it (`$1::text[]`, `$1::float8[]`, `$1::int[]`).
    public static func textArray(_ elements: [String?]) -> PostgresValue {
        var text = "{"
        for (index, element) in elements.enumerated() {
            if index > 0 { text += "," }
            guard let element else {
                text += "NULL"
                continue
            }
            text += "\""
            for character in element.unicodeScalars {
                if character == "\\" || character == "\"" { text += "\\" }
                text.unicodeScalars.append(character)
            }
            text += "\""
        }
        return .text(text + "}")
    }
}

/// Types that bind to a statement parameter ($1, $2…); nil binds NULL.
public protocol PostgresBindable {
    var postgresValue: PostgresValue { get }
}

extension String: PostgresBindable { public var postgresValue: PostgresValue { .text(self) } }
extension Int: PostgresBindable { public var postgresValue: PostgresValue { .text(String(self)) } }
extension Int64: PostgresBindable { public var postgresValue: PostgresValue { .text(String(self)) } }
extension Int32: PostgresBindable { public var postgresValue: PostgresValue { .text(String(self)) } }
extension Bool: PostgresBindable { public var postgresValue: PostgresValue { .text(self ? "true" : "false") } }
extension Data: PostgresBindable { public var postgresValue: PostgresValue { .bytea(self) } }
extension UUID: PostgresBindable { public var postgresValue: PostgresValue { .text(uuidString.lowercased()) } }
extension PostgresValue: PostgresBindable { public var postgresValue: PostgresValue { self } }

extension Double: PostgresBindable {
    /// The shortest text that reads back as the same double; infinities and NaN as PostgreSQL spells them.
    public var postgresValue: PostgresValue {
        if isNaN { return .text("NaN") }
        if isInfinite { return .text(self < 0 ? "-Infinity" : "Infinity") }
        return .text(String(self))
    }
}

/// A date binds as seconds since 1970 (double precision), as the SQLite stores keep it in a REAL.
extension Date: PostgresBindable {
    public var postgresValue: PostgresValue { timeIntervalSince1970.postgresValue }
}

/// One value of a result row, as the server sent it in text form (bytea already decoded).
public struct PostgresCell: Sendable, Equatable, Hashable {
    public enum Value: Sendable, Equatable, Hashable {
        case null
        case text(String)
        case bytes(Data)
    }

    public let value: Value
    /// The column's type OID (25 text, 20 int8, 17 bytea…); 0 when unknown.
    public let type: UInt32

    public init(_ value: Value, type: UInt32 = 0) {
        self.value = value
        self.type = type
    }

    public var isNull: Bool { value == .null }

    public var string: String? {
        switch value {
        case .null: return nil
        case .text(let text): return text
        case .bytes(let data): return String(data: data, encoding: .utf8)
        }
    }

    /// Whole numbers; a real is cut toward zero when it fits, a boolean reads as 1 or 0.
    public var int64: Int64? {
        guard case .text(let text) = value else { return nil }
        if let number = Int64(text) { return number }
        if let flag = Self.boolean(text) { return flag ? 1 : 0 }
        guard let real = Double(text), real.isFinite else { return nil }
        return Int64(exactly: real.rounded(.towardZero))
    }

    public var int: Int? { int64.map { Int($0) } }

    public var double: Double? {
        guard case .text(let text) = value else { return nil }
        return Double(text)
    }

    /// t/f as PostgreSQL prints booleans, and true/false, 1/0, yes/no, on/off.
    public var bool: Bool? {
        guard case .text(let text) = value else { return nil }
        return Self.boolean(text) ?? int64.map { $0 != 0 }
    }

    /// A bytea's bytes; the UTF-8 bytes of any other value.
    public var data: Data? {
        switch value {
        case .null: return nil
        case .text(let text): return Data(text.utf8)
        case .bytes(let data): return data
        }
    }

    /// A double precision of seconds since 1970, as `Date` binds.
    public var date: Date? { double.map { Date(timeIntervalSince1970: $0) } }

    private static func boolean(_ text: String) -> Bool? {
        switch text.lowercased() {
        case "t", "true", "yes", "y", "on": return true
        case "f", "false", "no", "n", "off": return false
        default: return nil
        }
    }
}

/// One result row, read by column index or name; an index or name past the end reads as NULL.
public struct PostgresRow: Sendable, Equatable {
    public let cells: [PostgresCell]
    public let columns: [String]

    public init(cells: [PostgresCell], columns: [String]) {
        self.cells = cells
        self.columns = columns
    }

    public var count: Int { cells.count }

    public subscript(_ index: Int) -> PostgresCell {
        cells.indices.contains(index) ? cells[index] : PostgresCell(.null)
    }

    public subscript(_ column: String) -> PostgresCell {
        columns.firstIndex(of: column).map { self[$0] } ?? PostgresCell(.null)
    }
}

extension PostgresCell: StoredValue {}
extension PostgresRow: StoredRow {}

extension PostgresRow {
    /// What `read` reads from the row by name; a column that does not read fails as `operation` did.
    func reading<T>(_ operation: String, _ read: (PostgresRow) throws(HubError) -> T) throws(PostgresError) -> T {
        do {
            return try read(self)
        } catch {
            throw PostgresError(message: error.message, operation: operation)
        }
    }
}
