import CLibPQ
import Foundation
import HubProtocol
import Storage

/// One connection to a PostgreSQL server through libpq. Statements with parameters are prepared
/// once per SQL text and cached; results come back in text form, bytea decoded. Not thread-safe:
/// use a connection from one thread at a time, and give each thread its own.
///
/// Settings made with `execute("SET …")` last as long as the session, and a reconnect starts a new
/// one: put lasting settings in the URL (`options=-c%20search_path%3Dname`).
public final class PostgresConnection {
    /// Where the connection goes, without any password: "db nh as nh on /tmp/x:5432".
    public let target: String
    private var handle: OpaquePointer?
    private var statements: [String: String] = [:]
    private var statementCount = 0
    private let nesting = TransactionNesting()
    var channels: Set<String> = []
    /// Channels a reconnect left this session not listening on: their notices are missed until a
    /// later try (`listenAgain`) succeeds.
    var unlistened: Set<String> = []
    /// Why listening again after a reconnect failed, until a try succeeds; nil while every channel is listened on.
    public internal(set) var listenFailure: PostgresError?
    /// Told when listening again after a reconnect fails (once, until it succeeds), and when a later
    /// try succeeds (nil).
    public var onListenChange: ((PostgresError?) -> Void)?
    /// The command that listens, replaced only by tests that make it fail.
    var listenCommand = "LISTEN"
    /// What a store does in each new session once its history is known (`followHistory`); nil for
    /// a connection that does not follow the history.
    var onSession: ((StoreHistory) throws -> Void)?
    /// The history of the last session that was set up; nil before the first.
    public internal(set) var history: StoreHistory?
    /// Whether this session's history is known and `onSession` has run for it.
    var sessionReady = true
    var preparingSession = false
    /// Sessions set up since the store last asked (`takeSessionEvents`).
    var sessionEvents: [StoreSessionEvent] = []

    /// Statements past this many run unprepared instead of growing the server's cache.
    static let statementCacheLimit = 256
    static let byteaType: Oid = 17

    /// Connects to `url`: "postgresql://user@host:port/db", or "postgresql:///db?host=/socket/dir&port=N&user=U".
    /// Connecting gives up after ten seconds unless the URL sets connect_timeout.
    public init(url: String) throws(PostgresError) {
        guard url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") else {
            let scheme = url.firstRange(of: "://").map { String(url[..<$0.upperBound]) } ?? "no scheme"
            throw PostgresError(
                message: "expected a URL that starts with postgresql:// or postgres://, got \(scheme)", operation: "connect")
        }
        target = try Self.describe(url)
        let keywords = ["connect_timeout", "fallback_application_name", "dbname"]
        let values = ["10", "notification-hub", url]
        let connection = Self.withCStrings(keywords) { keywordPointers in
            Self.withCStrings(values) { valuePointers in PQconnectdbParams(keywordPointers, valuePointers, 1) }
        }
        guard let connection else {
            throw PostgresError(sqlState: "08001", message: "out of memory", operation: "connect to \(target)")
        }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = Self.trimmed(PQerrorMessage(connection)) ?? "connection failed"
            PQfinish(connection)
            throw PostgresError(sqlState: "08001", message: message, operation: "connect to \(target)", connectionLost: true)
        }
        handle = connection
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
    }

    deinit { close() }

    /// Closes the connection; every later call fails.
    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        statements.removeAll()
    }

    public var isOpen: Bool { handle != nil }

    /// The server's version as a number, 150004 for 15.4; 0 when closed.
    public var serverVersion: Int { handle.map { Int(PQserverVersion($0)) } ?? 0 }

    func connection() throws(PostgresError) -> OpaquePointer {
        guard let handle else { throw PostgresError(sqlState: "08003", message: "the connection is closed", operation: "use \(target)") }
        // A session whose history is not known yet writes nothing before it is (`prepareSession`).
        if !sessionReady && !preparingSession { try prepareSession() }
        return handle
    }

    /// The error of a failed call: from `result` when there is one, else from the connection.
    func error(_ result: OpaquePointer?, _ operation: String) -> PostgresError {
        let broken = handle.map { PQstatus($0) == CONNECTION_BAD } ?? true
        func field(_ code: Int32) -> String? { result.flatMap { Self.trimmed(PQresultErrorField($0, code)) } }
        let message = field(NH_PG_DIAG_MESSAGE_PRIMARY) ?? result.flatMap { Self.trimmed(PQresultErrorMessage($0)) }
            ?? handle.flatMap { Self.trimmed(PQerrorMessage($0)) } ?? "the connection is closed"
        let state = field(NH_PG_DIAG_SQLSTATE) ?? (broken ? "08006" : nil)
        return PostgresError(
            sqlState: state, message: message, detail: field(NH_PG_DIAG_MESSAGE_DETAIL), operation: operation,
            connectionLost: broken)
    }

    // MARK: Statements

    /// Runs one or more statements that take no parameters; rows they return are dropped.
    public func execute(_ sql: String) throws(PostgresError) {
        let connection = try connection()
        let result = PQexec(connection, sql)
        defer { PQclear(result) }
        try check(result, sql)
    }

    /// Runs a statement with parameters $1, $2…; returns how many rows it inserted, changed,
    /// deleted or returned.
    @discardableResult
    public func run(_ sql: String, _ values: [PostgresBindable?] = []) throws(PostgresError) -> Int {
        try perform(sql, values) { result in Int(String(cString: PQcmdTuples(result))) ?? 0 }
    }

    /// Runs a query and returns every row.
    public func query(_ sql: String, _ values: [PostgresBindable?] = []) throws(PostgresError) -> [PostgresRow] {
        try perform(sql, values, Self.rows)
    }

    /// Runs a query and returns its first row, if any.
    public func queryOne(_ sql: String, _ values: [PostgresBindable?] = []) throws(PostgresError) -> PostgresRow? {
        try query(sql, values).first
    }

    /// Runs a query that always returns a row, such as an aggregate, and reads its first with `read`.
    public func queryRow<T>(
        _ sql: String, _ values: [PostgresBindable?] = [], _ read: (PostgresRow) throws(HubError) -> T
    ) throws(PostgresError) -> T {
        guard let row = try queryOne(sql, values) else { throw PostgresError(message: "the statement returned no row", operation: sql) }
        return try row.reading(sql, read)
    }

    /// Runs one statement, prepared once per SQL text and parameter types, and reads its result.
    /// A cached statement the server no longer has or can no longer use is prepared again; outside
    /// a transaction the statement is retried once then.
    private func perform<T>(
        _ sql: String, _ values: [PostgresBindable?], _ read: (OpaquePointer) -> T
    ) throws(PostgresError) -> T {
        let connection = try connection()
        let parameters = try Parameters(values.map { $0?.postgresValue }, sql)
        defer { parameters.deallocate() }
        let key = parameters.types.contains { $0 != 0 } ? "\(parameters.types)\u{1}\(sql)" : sql
        var retried = false
        while true {
            let name = try statement(for: key, sql, parameters)
            let result = parameters.withPointers { types, pointers, lengths, formats in
                if let name {
                    return PQexecPrepared(connection, name, parameters.count, pointers, lengths, formats, 0)
                }
                return PQexecParams(connection, sql, parameters.count, types, pointers, lengths, formats, 0)
            }
            defer { PQclear(result) }
            do throws(PostgresError) {
                try check(result, sql)
                return read(result!)
            } catch {
                let stale = error.sqlState == "26000" || (error.sqlState == "0A000" && error.message.contains("cached plan"))
                guard name != nil, stale else { throw error }
                statements[key] = nil
                guard !retried, PQtransactionStatus(connection) == PQTRANS_IDLE else { throw error }
                retried = true
            }
        }
    }

    /// The name of the prepared statement for `key`, preparing it first; nil once the cache is full.
    private func statement(for key: String, _ sql: String, _ parameters: Parameters) throws(PostgresError) -> String? {
        if let name = statements[key] { return name }
        guard statements.count < Self.statementCacheLimit else { return nil }
        let connection = try connection()
        statementCount += 1
        let name = "nh_\(statementCount)"
        let result = parameters.types.withUnsafeBufferPointer {
            PQprepare(connection, name, sql, parameters.count, $0.baseAddress)
        }
        defer { PQclear(result) }
        try check(result, sql)
        statements[key] = name
        return name
    }

    /// Throws unless `result` is a success; a COPY the statement began is ended first.
    private func check(_ result: OpaquePointer?, _ operation: String) throws(PostgresError) {
        guard let result else { throw error(nil, operation) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            return
        case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
            endCopy()
            throw PostgresError(sqlState: "0A000", message: "COPY is not supported here", operation: operation)
        default:
            throw error(result, operation)
        }
    }

    /// Leaves the COPY state so the connection stays usable.
    private func endCopy() {
        guard let handle else { return }
        _ = PQputCopyEnd(handle, "COPY is not supported here")
        var buffer: UnsafeMutablePointer<CChar>?
        while PQgetCopyData(handle, &buffer, 0) > 0 { PQfreemem(buffer) }
        while let result = PQgetResult(handle) { PQclear(result) }
    }

    private static func rows(_ result: OpaquePointer) -> [PostgresRow] {
        let rowCount = PQntuples(result)
        let columnCount = PQnfields(result)
        let columns = (0..<columnCount).map { String(cString: PQfname(result, $0)) }
        let types = (0..<columnCount).map { PQftype(result, $0) }
        var rows: [PostgresRow] = []
        rows.reserveCapacity(Int(rowCount))
        for row in 0..<rowCount {
            let cells = (0..<columnCount).map { column in
                PostgresCell(cellValue(result, row, column, types[Int(column)]), type: types[Int(column)])
            }
            rows.append(PostgresRow(cells: cells, columns: columns))
        }
        return rows
    }

    private static func cellValue(_ result: OpaquePointer, _ row: Int32, _ column: Int32, _ type: Oid) -> PostgresCell.Value {
        if PQgetisnull(result, row, column) == 1 { return .null }
        guard let text = PQgetvalue(result, row, column) else { return .null }
        let length = Int(PQgetlength(result, row, column))
        if type == byteaType {
            var size = 0
            guard let bytes = text.withMemoryRebound(to: UInt8.self, capacity: length + 1, { PQunescapeBytea($0, &size) })
            else { return .null }
            defer { PQfreemem(bytes) }
            return .bytes(Data(bytes: bytes, count: size))
        }
        let buffer = UnsafeRawBufferPointer(start: text, count: length)
        return .text(String(decoding: buffer, as: UTF8.self))
    }

    // MARK: Transactions

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    /// Nested calls become savepoints. A transaction that a statement inside `body` aborted (its
    /// error caught there) is rolled back and reported rather than committed.
    @discardableResult
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        try nesting.run(
            body,
            begin: { try execute($0.map { "SAVEPOINT \($0)" } ?? "BEGIN") },
            commit: {
                try checkTransactionOpen()
                try execute($0.map { "RELEASE SAVEPOINT \($0)" } ?? "COMMIT")
            },
            rollBack: { savepoint in
                // The body's error is the one reported; a rollback that fails finds the server ended
                // the transaction or the session, which undoes it.
                try? execute(savepoint.map { "ROLLBACK TO SAVEPOINT \($0); RELEASE SAVEPOINT \($0)" } ?? "ROLLBACK")
            })
    }

    /// Throws unless the server is in a transaction that can still commit.
    private func checkTransactionOpen() throws(PostgresError) {
        let connection = try connection()
        switch PQtransactionStatus(connection) {
        case PQTRANS_INTRANS:
            return
        case PQTRANS_INERROR:
            throw PostgresError(
                sqlState: "25P02", message: "the transaction was aborted by an earlier error and is rolled back",
                operation: "commit")
        default:
            throw error(nil, "commit: the transaction ended before its commit")
        }
    }

    public var isInTransaction: Bool { nesting.depth > 0 }

    // MARK: Connection state

    /// The connection's socket, for a poll loop; -1 when closed.
    public var socket: Int32 { handle.map { PQsocket($0) } ?? -1 }

    /// Whether the connection is usable, resetting it first when libpq has found it broken. A reset
    /// is a new session: prepared statements are prepared again and channels listened to again.
    /// A channel it could not listen on again keeps it from counting as usable, and is tried again
    /// at each call and each read of notifications (`listenAgain`).
    public func reconnectIfNeeded() -> Bool {
        guard let handle else { return false }
        if PQstatus(handle) == CONNECTION_OK { return listensToAll() }
        PQreset(handle)
        statements.removeAll()
        unlistened = channels
        guard PQstatus(handle) == CONNECTION_OK else { return false }
        // A new session, maybe on another server: its history is read before anything else runs
        // (a failure here is tried again at the next statement, the LISTENs' if there are any).
        if onSession != nil {
            sessionReady = false
            try? prepareSession()
        }
        return PQstatus(handle) == CONNECTION_OK && sessionReady && listensToAll()
    }

    /// `name` as a quoted SQL identifier.
    public static func quoteIdentifier(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    // MARK: Helpers

    /// libpq's text on one line: "connection to server … failed: Connection refused Is the server running…".
    static func trimmed(_ text: UnsafePointer<CChar>?) -> String? {
        guard let text else { return nil }
        let string = String(cString: text).split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
        return string.isEmpty ? nil : string
    }

    /// "db nh as nh on /socket/dir:5432" from the URL's parts, or libpq's reason it cannot read the URL.
    private static func describe(_ url: String) throws(PostgresError) -> String {
        var message: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(url, &message) else {
            let reason = trimmed(message) ?? "cannot be read"
            PQfreemem(message)
            throw PostgresError(message: "bad PostgreSQL URL: \(reason)", operation: "connect")
        }
        defer { PQconninfoFree(options) }
        var parts: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { parts[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        let host = parts["host"] ?? parts["hostaddr"] ?? "the default socket"
        let port = parts["port"].map { ":\($0)" } ?? ""
        let user = parts["user"].map { " as \($0)" } ?? ""
        return "db \(parts["dbname"] ?? "(default)")\(user) on \(host)\(port)"
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
        let copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        let pointers: [UnsafePointer<CChar>?] = copies.map { $0.map { UnsafePointer($0) } } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// Parameter values copied into C memory: text as NUL-terminated UTF-8 in text format, bytea as
/// raw bytes in binary format, NULL as a null pointer.
struct Parameters {
    let types: [Oid]
    let values: [UnsafeMutablePointer<CChar>?]
    let lengths: [Int32]
    let formats: [Int32]

    var count: Int32 { Int32(values.count) }

    init(_ parameters: [PostgresValue?], _ sql: String) throws(PostgresError) {
        var types: [Oid] = [], values: [UnsafeMutablePointer<CChar>?] = [], lengths: [Int32] = [], formats: [Int32] = []
        for (index, parameter) in parameters.enumerated() {
            switch parameter {
            case nil:
                types.append(0); values.append(nil); lengths.append(0); formats.append(0)
            case .text(let text):
                guard !text.utf8.contains(0) else {
                    values.forEach { free($0) }
                    throw PostgresError(
                        sqlState: "22021", message: "parameter $\(index + 1) holds a zero byte, which text cannot",
                        operation: sql)
                }
                types.append(0); values.append(strdup(text)); lengths.append(0); formats.append(0)
            case .bytea(let data), .binary(let data, _):
                guard data.count <= Int32.max else {
                    values.forEach { free($0) }
                    throw PostgresError(sqlState: "54000", message: "parameter $\(index + 1) is too large", operation: sql)
                }
                let copy = malloc(max(data.count, 1))!.assumingMemoryBound(to: CChar.self)
                data.withUnsafeBytes { bytes in
                    if let base = bytes.baseAddress { UnsafeMutableRawPointer(copy).copyMemory(from: base, byteCount: data.count) }
                }
                if case .binary(_, let oid) = parameter { types.append(oid) } else { types.append(PostgresConnection.byteaType) }
                values.append(copy)
                lengths.append(Int32(data.count)); formats.append(1)
            }
        }
        (self.types, self.values, self.lengths, self.formats) = (types, values, lengths, formats)
    }

    func deallocate() { values.forEach { free($0) } }

    func withPointers<R>(
        _ body: (UnsafePointer<Oid>?, UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R
    ) -> R {
        let constant = values.map { $0.map { UnsafePointer($0) } }
        return types.withUnsafeBufferPointer { types in
            constant.withUnsafeBufferPointer { values in
                lengths.withUnsafeBufferPointer { lengths in
                    formats.withUnsafeBufferPointer { formats in
                        body(types.baseAddress, values.baseAddress, lengths.baseAddress, formats.baseAddress)
                    }
                }
            }
        }
    }
}
