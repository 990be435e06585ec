/// A failed PostgreSQL call: what was being done, the server's SQLSTATE and its primary message.
/// Errors made on this side (a bad URL, a text with a zero byte) have no SQLSTATE unless one fits.
public struct PostgresError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The five-character SQLSTATE, such as "23505"; nil when there is none.
    public let sqlState: String?
    public let message: String
    /// The server's DETAIL line, such as "Key (name)=(a) already exists."
    public let detail: String?
    /// The statement or step that failed.
    public let operation: String
    /// The connection was broken when the error was made, or the server said it is going away.
    public let isConnectionLost: Bool

    public init(
        sqlState: String? = nil, message: String, detail: String? = nil, operation: String, connectionLost: Bool = false
    ) {
        self.sqlState = sqlState
        self.message = message
        self.detail = detail
        self.operation = operation
        self.isConnectionLost = connectionLost || sqlState.map(Self.connectionStates.contains) == true
    }

    /// Connection exceptions (not 08P01, a protocol violation the connection survives) and the
    /// server shutting down or refusing connections for now.
    static let connectionStates: Set<String> = ["08000", "08001", "08003", "08004", "08006", "57P01", "57P02", "57P03"]

    /// A UNIQUE or PRIMARY KEY constraint was violated.
    public var isUniqueViolation: Bool { sqlState == "23505" }

    /// The transaction lost to a concurrent one (serialization failure or deadlock) and may be retried.
    public var isSerializationFailure: Bool { sqlState == "40001" || sqlState == "40P01" }

    public var description: String {
        let shown = operation.count > 200 ? operation.prefix(200) + "…" : Substring(operation)
        let state = sqlState.map { " (SQLSTATE \($0))" } ?? ""
        let more = detail.map { " — \($0)" } ?? ""
        return "\(shown): \(message)\(more)\(state)"
    }
}
