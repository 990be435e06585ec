import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Structured logging: one logfmt line per event on standard error,
/// `ts=… level=info service=nh-registry msg="…" key=value`.
public struct Logger: Sendable {
    public enum Level: Int, Comparable, Sendable, CaseIterable, Codable {
        case trace, debug, info, notice, warning, error

        public init?(name: String) {
            guard let level = Level.allCases.first(where: { $0.name == name.lowercased() }) else { return nil }
            self = level
        }

        public var name: String {
            switch self {
            case .trace: return "trace"
            case .debug: return "debug"
            case .info: return "info"
            case .notice: return "notice"
            case .warning: return "warning"
            case .error: return "error"
            }
        }

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public let service: String
    public var level: Level
    private let sink: @Sendable (String) -> Void

    public init(service: String, level: Level = .info, sink: (@Sendable (String) -> Void)? = nil) {
        self.service = service
        self.level = level
        self.sink = sink ?? Logger.standardError
    }

    private static let lock = Mutex(())

    private static let standardError: @Sendable (String) -> Void = { line in
        lock.withLock { _ in
            _ = StandardStream.write(Data((line + "\n").utf8))
        }
    }

    public func log(_ level: Level, _ message: String, _ fields: [(String, CustomStringConvertible)] = []) {
        guard level >= self.level else { return }
        sink(Logger.format(level: level, service: service, message: message, fields: fields, at: Date()))
    }

    public func trace(_ message: String, _ fields: (String, CustomStringConvertible)...) { log(.trace, message, fields) }
    public func debug(_ message: String, _ fields: (String, CustomStringConvertible)...) { log(.debug, message, fields) }
    public func info(_ message: String, _ fields: (String, CustomStringConvertible)...) { log(.info, message, fields) }
    public func notice(_ message: String, _ fields: (String, CustomStringConvertible)...) { log(.notice, message, fields) }
    public func warning(_ message: String, _ fields: (String, CustomStringConvertible)...) { log(.warning, message, fields) }
    public func error(_ message: String, _ fields: (String, CustomStringConvertible)...) { log(.error, message, fields) }

    static func format(
        level: Level, service: String, message: String, fields: [(String, CustomStringConvertible)], at date: Date
    ) -> String {
        var line = "ts=\(date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))) level=\(level.name) service=\(service) msg=\(quote(message))"
        for (key, value) in fields {
            line += " \(key)=\(quote(value.description))"
        }
        return line
    }

    /// Quotes a value when it has spaces, quotes, an equals sign or control characters.
    static func quote(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.unicodeScalars.contains {
            $0 == " " || $0 == "\"" || $0 == "=" || $0 == "\\" || $0.value < 0x20
        }
        guard needsQuotes else { return value }
        var escaped = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": escaped += "\\\""
            case "\\": escaped += "\\\\"
            case "\n": escaped += "\\n"
            case "\t": escaped += "\\t"
            case "\r": escaped += "\\r"
            default:
                if scalar.value < 0x20 {
                    escaped += String(format: "\\u%04x", scalar.value)
                } else {
                    escaped.unicodeScalars.append(scalar)
                }
            }
        }
        return escaped + "\""
    }
}


/// Writes to a standard stream with write(2), so that a full disk or a closed reader behind the
/// stream loses the line instead of stopping the process (FileHandle's `write(_:)` traps on error).
public enum StandardStream {
    /// Writes all of `data` to `descriptor`; false when the stream would not take it.
    @discardableResult
    public static func write(_ data: Data, to descriptor: Int32 = STDERR_FILENO) -> Bool {
        data.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) -> Bool in
            guard var pointer = buffer.baseAddress else { return true }
            var left = buffer.count
            while left > 0 {
                let written = Glibc.write(descriptor, pointer, left)
                if written < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                left -= written
                pointer += written
            }
            return true
        }
    }
}

extension Logger {
    /// What a listener on the store's notices reports when, reconnected, it cannot listen again
    /// (an error) and when it can (nil): meanwhile other processes' changes are read only at each heartbeat.
    public func listening(on channel: String) -> (Error?) -> Void {
        { failure in
            if let failure {
                self.error(
                    "cannot listen for other processes' changes after reconnecting; they are read at each heartbeat until it can",
                    ("channel", channel), ("error", "\(failure)"))
            } else {
                self.notice("listening again for other processes' changes", ("channel", channel))
            }
        }
    }
}
