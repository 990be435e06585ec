import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Work posted from any thread to run on an event loop's thread: queued under a lock, with a pipe
/// that the loop polls to know there is some.
public final class LoopMailbox: Sendable {
    let fileDescriptor: Int32
    private let writeEnd: Int32
    private let queue = Mutex<[@Sendable () -> Void]>([])

    /// A mailbox no loop reads yet: `EventLoop.watch(_:then:)` makes a loop read it.
    public init() throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw ConfigError("cannot make a pipe: \(String(cString: strerror(errno)))") }
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        fileDescriptor = fds[0]
        writeEnd = fds[1]
    }

    deinit {
        close(fileDescriptor)
        close(writeEnd)
    }

    /// Runs `work` on the loop's thread, soon.
    public func post(_ work: @escaping @Sendable () -> Void) {
        let wasEmpty = queue.withLock { queue in
            queue.append(work)
            return queue.count == 1
        }
        if wasEmpty {
            var byte: UInt8 = 1
            _ = write(writeEnd, &byte, 1)
        }
    }

    /// Runs what was posted; called by the loop.
    func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(fileDescriptor, &buffer, buffer.count) > 0 {}
        let work = queue.withLock { queue in
            let taken = queue
            queue.removeAll(keepingCapacity: true)
            return taken
        }
        for item in work { item() }
    }
}
