import CSQLite
import Foundation

/// One connection to an SQLite file, in WAL mode with a busy timeout.
/// Statements are prepared once per SQL text and cached. Not thread-safe: give each thread its own
/// connection; WAL lets readers on other connections run beside one writer.
public final class SQLiteDatabase {
    public let path: String
    private var handle: OpaquePointer?
    private var cache: [String: PreparedStatement] = [:]
    private let nesting = TransactionNesting()

    public struct Options: Sendable {
        /// Milliseconds a statement waits for another connection's lock before failing.
        public var busyTimeout: Int32 = 5_000
        public var readOnly = false
        /// FULL survives power loss after every commit; NORMAL may lose the last commits then,
        /// but never corrupts. Accepted notifications need FULL.
        public var synchronous: String = "FULL"

        /// The most bytes the database file may take, 0 for no limit; a write beyond it fails as a
        /// full disk does (`StorageError.isFull`).
        public var maxBytes: Int = 0

        public init(busyTimeout: Int32 = 5_000, readOnly: Bool = false, synchronous: String = "FULL", maxBytes: Int = 0) {
            self.busyTimeout = busyTimeout
            self.readOnly = readOnly
            self.synchronous = synchronous
            self.maxBytes = maxBytes
        }
    }

    public init(path: String, options: Options = Options()) throws(StorageError) {
        self.path = path
        var db: OpaquePointer?
        let flags = (options.readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE))
            | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            throw StorageError(code: rc, message: message, operation: "open \(path)")
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, options.busyTimeout)
        if !options.readOnly {
            try enterWAL(busyTimeoutMs: options.busyTimeout)
        }
        try execute("PRAGMA synchronous=\(options.synchronous == "NORMAL" ? "NORMAL" : "FULL")")
        try execute("PRAGMA foreign_keys=ON")
        // Up to 32 MiB of pages held, where SQLite's default is 2 MiB: a store of a million rows
        // has indexes of tens of megabytes, and each insert at a random place in one that is not
        // held reads its pages again from the file.
        try execute("PRAGMA cache_size=-32768")
        if options.maxBytes > 0 {
            let pageSize = try pragma("page_size")
            _ = try queryOne("PRAGMA max_page_count=\(max(options.maxBytes / max(pageSize, 512), 1))")
        }
    }

    deinit { close() }

    /// Switches to WAL mode. While another connection writes to a store still in its first
    /// journal mode (a command opening a fresh store beside the service that made it), SQLite
    /// answers the switch with SQLITE_BUSY at once rather than call the busy handler, since it
    /// already holds a read lock; so the switch is tried again until the busy timeout has passed.
    private func enterWAL(busyTimeoutMs: Int32) throws(StorageError) {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, busyTimeoutMs)) * 1_000_000
        while true {
            do {
                try execute("PRAGMA journal_mode=WAL")
                return
            } catch where error.isBusy && DispatchTime.now().uptimeNanoseconds < deadline {
                usleep(5_000)
            }
        }
    }

    /// Finalizes every statement and closes the connection.
    public func close() {
        for statement in cache.values { statement.finalize() }
        cache.removeAll()
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    public var isOpen: Bool { handle != nil }

    func connection() throws(StorageError) -> OpaquePointer {
        guard let handle else {
            throw StorageError(code: SQLITE_MISUSE, message: "the database is closed", operation: "use \(path)")
        }
        return handle
    }

    func error(_ rc: Int32, _ operation: String) -> StorageError {
        let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "the database is closed"
        return StorageError(code: rc, message: message, operation: operation)
    }

    // MARK: Statements

    /// Runs one or more statements that take no parameters and return no rows.
    public func execute(_ sql: String) throws(StorageError) {
        let db = try connection()
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(db, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? "error \(rc)"
            sqlite3_free(message)
            throw StorageError(code: rc, message: text, operation: sql)
        }
    }

    /// The cached prepared statement for `sql`, reset and with no bindings.
    public func prepare(_ sql: String) throws(StorageError) -> PreparedStatement {
        try refuseIfRolledBack(sql)
        if let statement = cache[sql] {
            statement.reset()
            return statement
        }
        let statement = try PreparedStatement(database: self, sql: sql)
        cache[sql] = statement
        return statement
    }

    /// Runs a statement that returns no rows; returns how many rows it changed.
    @discardableResult
    public func run(_ sql: String, _ parameters: [SQLiteBindable] = []) throws(StorageError) -> Int {
        let statement = try prepare(sql)
        try statement.bind(parameters)
        while try statement.step() {}
        return Int(sqlite3_changes(try connection()))
    }

    /// Runs a query and returns every row.
    public func query(_ sql: String, _ parameters: [SQLiteBindable] = []) throws(StorageError) -> [Row] {
        let statement = try prepare(sql)
        try statement.bind(parameters)
        var rows: [Row] = []
        while try statement.step() { rows.append(statement.row()) }
        statement.reset()
        return rows
    }

    /// Runs a query and returns its first row, if any.
    public func queryOne(_ sql: String, _ parameters: [SQLiteBindable] = []) throws(StorageError) -> Row? {
        let statement = try prepare(sql)
        try statement.bind(parameters)
        let row = try statement.step() ? statement.row() : nil
        statement.reset()
        return row
    }

    /// The rowid of the last inserted row.
    public var lastInsertRowID: Int64 {
        handle.map { sqlite3_last_insert_rowid($0) } ?? 0
    }

    // MARK: Transactions

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    /// Nested calls become savepoints. IMMEDIATE takes the write lock up front, so a writer waits
    /// for the busy timeout instead of failing halfway.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try nesting.run(
            body,
            begin: { savepoint in
                // A savepoint would open a transaction of its own, and its release commit it alone.
                if savepoint != nil { try refuseIfRolledBack("SAVEPOINT") }
                try execute(savepoint.map { "SAVEPOINT \($0)" } ?? "BEGIN IMMEDIATE")
            },
            commit: { try execute($0.map { "RELEASE \($0)" } ?? "COMMIT") },
            rollBack: { savepoint in
                // The body's error is the one reported; a rollback that fails finds SQLite undid the
                // transaction already, and `refuseIfRolledBack` stops what would follow.
                try? execute(savepoint.map { "ROLLBACK TO \($0); RELEASE \($0)" } ?? "ROLLBACK")
            })
    }

    public var isInTransaction: Bool { nesting.depth > 0 }

    /// SQLite rolls a whole transaction back on some errors, such as a full disk; statements after
    /// that would commit one by one, outside the transaction their caller believes in.
    private func refuseIfRolledBack(_ operation: String) throws(StorageError) {
        if nesting.depth > 0, let handle, sqlite3_get_autocommit(handle) != 0 {
            throw StorageError(code: SQLITE_ABORT, message: "the transaction was rolled back by an earlier error", operation: operation)
        }
    }

    /// Whether a group opened by `beginGroup()` waits for `commitGroup()`.
    public private(set) var groupOpen = false

    /// Opens a transaction that stays open across calls until `commitGroup()`, so that many small
    /// writes share one commit; `transaction` calls inside it become savepoints. For a store whose
    /// last moments may be lost on a crash because they can be rebuilt: each commit writes every
    /// page it touched to the log once, however many writes changed it.
    public func beginGroup() throws(StorageError) {
        guard !groupOpen else { return }
        precondition(nesting.depth == 0, "a group opens outside any transaction")
        try execute("BEGIN IMMEDIATE")
        nesting.depth = 1
        groupOpen = true
    }

    /// Commits the open group, if any. On failure everything since `beginGroup()` is rolled back.
    public func commitGroup() throws(StorageError) {
        guard groupOpen else { return }
        groupOpen = false
        nesting.depth = 0
        do {
            try execute("COMMIT")
        } catch {
            // The commit's error is thrown; a ROLLBACK that fails finds nothing left to undo.
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Rolls the open group back, if any: everything since `beginGroup()` is undone.
    public func rollBackGroup() {
        guard groupOpen else { return }
        groupOpen = false
        nesting.depth = 0
        // A ROLLBACK fails only where SQLite undid the group already (a full disk, an I/O error):
        // nothing is left to undo.
        try? execute("ROLLBACK")
    }

    // MARK: Schema

    /// PRAGMA user_version: the schema version the migrations reached.
    public var schemaVersion: Int {
        get throws(StorageError) { try pragma("user_version") }
    }

    /// An integer setting's value, read by its name.
    private func pragma(_ name: String) throws(StorageError) -> Int {
        let operation = "PRAGMA \(name)"
        guard let row = try queryOne(operation) else {
            throw StorageError(code: SQLITE_MISMATCH, message: "no value", operation: operation)
        }
        do {
            return try row.int(name, of: "PRAGMA")
        } catch {
            throw StorageError(code: SQLITE_MISMATCH, message: error.message, operation: operation)
        }
    }

    public static var libraryVersion: String { String(cString: sqlite3_libversion()) }
}
