/// A failed SQLite call: what was being done, SQLite's result code and its message.
public struct StorageError: Error, Sendable, Equatable, CustomStringConvertible {
    public let code: Int32
    public let message: String
    public let operation: String
    public let file: String
    public let line: Int

    public init(code: Int32, message: String, operation: String, file: String = #fileID, line: Int = #line) {
        self.code = code
        self.message = message
        self.operation = operation
        self.file = file
        self.line = line
    }

    /// The primary result code, without the extended bits.
    public var primaryCode: Int32 { code & 0xff }

    /// A UNIQUE, PRIMARY KEY or other constraint was violated.
    public var isConstraintViolation: Bool { primaryCode == 19 }

    /// The database stayed locked for longer than the busy timeout.
    public var isBusy: Bool { primaryCode == 5 || primaryCode == 6 }

    /// The disk, or the store's configured size limit, has no room for the write.
    public var isFull: Bool { primaryCode == 13 }

    public var description: String { "\(operation): \(message) (sqlite \(code))" }

    public static func == (lhs: StorageError, rhs: StorageError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message && lhs.operation == rhs.operation
    }
}
