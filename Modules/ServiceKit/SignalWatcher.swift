import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Turns SIGINT and SIGTERM into a readable pipe, so an event loop can poll for shutdown
/// beside its sockets and stop between two messages, never in the middle of one.
public final class SignalWatcher: @unchecked Sendable {  // immutable after init; the sources only run on their own queue
    /// Poll this for readability.
    public let fileDescriptor: Int32
    private let writeEnd: Int32
    private let sources: [DispatchSourceSignal]

    public init(signals: [Int32] = [SIGINT, SIGTERM]) {
        var fds: [Int32] = [0, 0]
        precondition(pipe(&fds) == 0, "pipe() failed: \(errno)")
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        fileDescriptor = fds[0]
        writeEnd = fds[1]
        let queue = DispatchQueue(label: "signals")
        var sources: [DispatchSourceSignal] = []
        let writeEnd = fds[1]
        for number in signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler {
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(writeEnd, &byte, 1)
            }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    /// Asks the loop to stop, as a signal would.
    public func trigger() {
        var byte: UInt8 = 0
        _ = write(writeEnd, &byte, 1)
    }

    /// Reads what is in the pipe; returns the last signal number seen (0 for `trigger`), or nil if none.
    public func drain() -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 16)
        var seen: Int32?
        while true {
            let count = read(fileDescriptor, &buffer, buffer.count)
            if count <= 0 { break }
            seen = Int32(buffer[count - 1])
        }
        return seen
    }

    deinit {
        for source in sources { source.cancel() }
        close(fileDescriptor)
        close(writeEnd)
    }
}
