/// A failure with a stable code, a message that says what to fix, and where it was raised.
public struct HubError: Error, Sendable, Equatable, CustomStringConvertible {
    public let code: ErrorCode
    public let message: String
    public let file: String
    public let line: Int

    public init(_ code: ErrorCode, _ message: String, file: String = #fileID, line: Int = #line) {
        self.code = code
        self.message = message
        self.file = file
        self.line = line
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// The reply payload that carries this error over the bus.
    public var reply: ErrorReply { ErrorReply(code: code, message: message) }

    public static func == (lhs: HubError, rhs: HubError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }
}
