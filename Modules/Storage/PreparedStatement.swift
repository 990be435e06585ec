import CSQLite
import Foundation

/// A compiled statement, owned and cached by its `SQLiteDatabase`.
public final class PreparedStatement {
    private var handle: OpaquePointer?
    private unowned let database: SQLiteDatabase
    public let sql: String
    /// The column names, read once: every row of the statement shares the array.
    private var columns: [String] = []

    init(database: SQLiteDatabase, sql: String) throws(StorageError) {
        self.database = database
        self.sql = sql
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v3(try database.connection(), sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard rc == SQLITE_OK, let statement else {
            throw database.error(rc, "prepare \(sql)")
        }
        handle = statement
    }

    deinit { finalize() }

    func finalize() {
        if let handle { sqlite3_finalize(handle) }
        handle = nil
    }

    func reset() {
        guard let handle else { return }
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    public func bind(_ parameters: [SQLiteBindable]) throws(StorageError) {
        guard let handle else { throw database.error(SQLITE_MISUSE, "bind \(sql)") }
        let expected = Int(sqlite3_bind_parameter_count(handle))
        guard parameters.count == expected else {
            throw StorageError(
                code: SQLITE_RANGE, message: "expected \(expected) parameters, got \(parameters.count)", operation: sql)
        }
        for (offset, parameter) in parameters.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch parameter.sqliteValue {
            case .null: rc = sqlite3_bind_null(handle, index)
            case .integer(let value): rc = sqlite3_bind_int64(handle, index, value)
            case .real(let value): rc = sqlite3_bind_double(handle, index, value)
            case .text(let value): rc = sqlite3_bind_text(handle, index, value, -1, nh_sqlite_transient())
            case .blob(let value):
                rc = value.withUnsafeBytes {
                    sqlite3_bind_blob64(handle, index, $0.baseAddress, sqlite3_uint64($0.count), nh_sqlite_transient())
                }
            }
            guard rc == SQLITE_OK else { throw database.error(rc, "bind parameter \(index) of \(sql)") }
        }
    }

    /// Steps once: true when a row is ready, false when the statement is done.
    public func step() throws(StorageError) -> Bool {
        guard let handle else { throw database.error(SQLITE_MISUSE, "step \(sql)") }
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let rc:
            let error = database.error(rc, sql)
            sqlite3_reset(handle)
            throw error
        }
    }

    /// The current row's values.
    func row() -> Row {
        guard let handle else { return Row(values: [], columns: []) }
        let count = sqlite3_column_count(handle)
        if columns.count != Int(count) {
            columns = (0..<count).map { sqlite3_column_name(handle, $0).map { String(cString: $0) } ?? "" }
        }
        var values: [SQLiteValue] = []
        values.reserveCapacity(Int(count))
        for column in 0..<count {
            switch sqlite3_column_type(handle, column) {
            case SQLITE_INTEGER: values.append(.integer(sqlite3_column_int64(handle, column)))
            case SQLITE_FLOAT: values.append(.real(sqlite3_column_double(handle, column)))
            case SQLITE_TEXT:
                values.append(.text(String(cString: sqlite3_column_text(handle, column))))
            case SQLITE_BLOB:
                let size = Int(sqlite3_column_bytes(handle, column))
                if size == 0 {
                    values.append(.blob(Data()))
                } else {
                    values.append(.blob(Data(bytes: sqlite3_column_blob(handle, column), count: size)))
                }
            default: values.append(.null)
            }
        }
        return Row(values: values, columns: columns)
    }
}

/// One result row, read by column name (`StoredRow`) or index.
public struct Row: Sendable, Equatable {
    public let values: [SQLiteValue]
    public let columns: [String]
    public subscript(_ column: Int) -> SQLiteValue {
        column < values.count ? values[column] : .null
    }
}
