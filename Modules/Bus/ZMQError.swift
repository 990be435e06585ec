import CLibZMQ

#if canImport(Glibc)
import Glibc
#endif

/// A failed libzmq call: the function that failed, its errno and libzmq's text for it.
public struct ZMQError: Error, Equatable, Sendable, CustomStringConvertible {
    public let function: String
    public let errno: Int32

    public init(function: String, errno: Int32) {
        self.function = function
        self.errno = errno
    }

    public var message: String { String(cString: zmq_strerror(errno)) }

    /// The socket's context was terminated; a loop seeing this should stop.
    public var isTerminated: Bool { errno == ETERM }

    public var description: String { "\(function): \(message) (errno \(errno))" }
}

/// Errors of the higher-level bus patterns, beside the raw libzmq ones.
public enum BusError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No reply arrived after every attempt.
    case timeout(endpoint: String, attempts: Int)
    /// A frame sequence did not have the shape the pattern expects.
    case malformedMessage(String)
    /// A CURVE key was not 40 characters of Z85.
    case invalidKey(String)

    public var description: String {
        switch self {
        case .timeout(let endpoint, let attempts):
            return "no reply from \(endpoint) after \(attempts) attempt(s)"
        case .malformedMessage(let why):
            return "malformed message: \(why)"
        case .invalidKey(let why):
            return "invalid CURVE key: \(why)"
        }
    }
}

/// Runs a libzmq call that returns -1 on failure, retrying on EINTR.
/// Returns nil when the call would block (EAGAIN), and throws a `ZMQError` on any other failure.
@inline(__always)
@discardableResult
func zmqCall(_ function: String, _ body: () -> Int32) throws(ZMQError) -> Int32? {
    while true {
        let rc = body()
        if rc >= 0 { return rc }
        let code = zmq_errno()
        if code == EINTR { continue }
        if code == EAGAIN { return nil }
        throw ZMQError(function: function, errno: code)
    }
}

/// Like `zmqCall`, for calls where EAGAIN is a real failure too.
@inline(__always)
@discardableResult
func zmqCheck(_ function: String, _ body: () -> Int32) throws(ZMQError) -> Int32 {
    guard let rc = try zmqCall(function, body) else {
        throw ZMQError(function: function, errno: EAGAIN)
    }
    return rc
}
