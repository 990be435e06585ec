import CLibZMQ
import Synchronization

/// A libzmq context. It is thread-safe; the sockets made from it are not.
public final class ZMQContext: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    private let ended = Atomic<Bool>(false)

    /// One context per process is the usual shape; services share this one.
    public static let shared = ZMQContext()

    /// `maxSockets` raises libzmq's limit of 1,023 sockets per context, for a process that holds many.
    public init(ioThreads: Int = 1, maxSockets: Int? = nil) {
        guard let handle = zmq_ctx_new() else {
            fatalError("zmq_ctx_new failed: out of memory")
        }
        zmq_ctx_set(handle, ZMQ_IO_THREADS, Int32(ioThreads))
        if let maxSockets { zmq_ctx_set(handle, ZMQ_MAX_SOCKETS, Int32(maxSockets)) }
        self.handle = handle
    }

    deinit {
        // Sockets hold a strong reference to their context, so all of them are closed by now.
        terminate()
    }

    /// Ends the context once: waits until every socket made from it is closed and has sent what
    /// its linger allows, then frees it. No socket may be made from it after.
    public func terminate() {
        guard !ended.exchange(true, ordering: .acquiringAndReleasing) else { return }
        while zmq_ctx_term(handle) != 0 && zmq_errno() == EINTR {}
    }

    /// Sets the number of I/O threads; takes effect only before the context's first socket.
    public func setIOThreads(_ count: Int) {
        zmq_ctx_set(handle, ZMQ_IO_THREADS, Int32(count))
    }

    public func socket(_ type: SocketType) throws(ZMQError) -> ZMQSocket {
        try ZMQSocket(context: self, type: type)
    }

    /// libzmq's version as (major, minor, patch).
    public static var version: (major: Int, minor: Int, patch: Int) {
        var major: Int32 = 0, minor: Int32 = 0, patch: Int32 = 0
        zmq_version(&major, &minor, &patch)
        return (Int(major), Int(minor), Int(patch))
    }

    /// Whether libzmq was built with a capability such as "curve" or "ipc".
    public static func has(_ capability: String) -> Bool {
        zmq_has(capability) != 0
    }
}

public enum SocketType: Sendable, CustomStringConvertible {
    case pair, pub, sub, req, rep, dealer, router, pull, push

    var rawValue: Int32 {
        switch self {
        case .pair: return ZMQ_PAIR
        case .pub: return ZMQ_PUB
        case .sub: return ZMQ_SUB
        case .req: return ZMQ_REQ
        case .rep: return ZMQ_REP
        case .dealer: return ZMQ_DEALER
        case .router: return ZMQ_ROUTER
        case .pull: return ZMQ_PULL
        case .push: return ZMQ_PUSH
        }
    }

    public var description: String {
        switch self {
        case .pair: return "PAIR"
        case .pub: return "PUB"
        case .sub: return "SUB"
        case .req: return "REQ"
        case .rep: return "REP"
        case .dealer: return "DEALER"
        case .router: return "ROUTER"
        case .pull: return "PULL"
        case .push: return "PUSH"
        }
    }
}
