import Bus
import Foundation

/// A single-threaded loop over sockets and timers that stops on SIGINT or SIGTERM.
/// Handlers run one at a time, so service state needs no locks.
public final class EventLoop {
    private var poller = Poller()
    private var handlers: [Int: () throws -> Void] = [:]
    private var timers: [Timer] = []
    private var dueTasks: [(milliseconds: () -> Int?, task: () throws -> Void)] = []
    private let signals: SignalWatcher
    private let signalIndex: Int
    private var stopping = false
    private var stall: (after: Duration, handler: (Duration) throws -> Void)?
    public let logger: Logger

    private struct Timer {
        let interval: Duration
        var due: ContinuousClock.Instant
        let task: () throws -> Void
    }

    public init(signals: SignalWatcher = SignalWatcher(), logger: Logger) {
        self.signals = signals
        self.logger = logger
        signalIndex = poller.add(fileDescriptor: signals.fileDescriptor)
    }

    /// Calls `handler` whenever `socket` has something to read.
    public func watch(_ socket: ZMQSocket, _ handler: @escaping () throws -> Void) {
        handlers[poller.add(socket)] = handler
    }

    /// Calls `handler` whenever the file descriptor is readable; returns the watch, for `rewatch`.
    @discardableResult
    public func watch(fileDescriptor: Int32, _ handler: @escaping () throws -> Void) -> Int {
        let index = poller.add(fileDescriptor: fileDescriptor)
        handlers[index] = handler
        return index
    }

    /// Points a watch at another file descriptor, as after a reconnect; -1 stops it watching.
    public func rewatch(_ watch: Int, fileDescriptor: Int32) {
        poller.replace(watch, fileDescriptor: fileDescriptor)
    }

    /// Runs the work other threads post to `mailbox` on this loop, in the order it was posted;
    /// `then` runs after each batch of it.
    public func watch(_ mailbox: LoopMailbox, then: @escaping () -> Void = {}) {
        watch(fileDescriptor: mailbox.fileDescriptor) {
            mailbox.drain()
            then()
        }
    }

    /// Calls `task` every `milliseconds`, first after one interval.
    public func every(milliseconds: Int, _ task: @escaping () throws -> Void) {
        let interval = Duration.milliseconds(milliseconds)
        timers.append(Timer(interval: interval, due: .now + interval, task: task))
    }

    /// Calls `task` whenever `milliseconds()`, asked before each wait and after each wake, has come
    /// down to 0; nil means no limit. For a library that keeps its own timeouts, such as
    /// libmicrohttpd's for idle connections, run from this loop.
    public func whenDue(in milliseconds: @escaping () -> Int?, _ task: @escaping () throws -> Void) {
        dueTasks.append((milliseconds, task))
    }

    /// Calls `handler`, before any socket's or timer's, whenever the loop wakes more than `after`
    /// since it last woke: the process was stopped, or a handler ran that long. With timers every
    /// few milliseconds, an idle loop never waits that long.
    public func onStall(after: Duration, _ handler: @escaping (Duration) throws -> Void) {
        stall = (after, handler)
    }

    /// Ends `run` after the current handler returns.
    public func stop() { signals.trigger() }

    /// Runs until a signal or `stop()`. A handler that throws is logged and the loop goes on,
    /// except for a terminated context, which ends it.
    public func run() throws {
        var woke = ContinuousClock.now
        while !stopping {
            let ready = try poller.poll(timeout: nextTimeout())
            let now = ContinuousClock.now
            if let stall, woke.duration(to: now) > stall.after {
                do {
                    try stall.handler(woke.duration(to: now))
                } catch {
                    logger.error("stall handler failed", ("error", "\(error)"))
                }
            }
            woke = now
            if ready.contains(signalIndex) {
                let number = signals.drain() ?? 0
                logger.info("shutting down", ("signal", number))
                stopping = true
                break
            }
            for index in ready.sorted() {
                guard let handler = handlers[index] else { continue }
                do {
                    try handler()
                } catch let error as ZMQError where error.isTerminated {
                    stopping = true
                } catch {
                    logger.error("handler failed", ("error", "\(error)"))
                }
            }
            runDueTimers()
            for due in dueTasks where due.milliseconds() == 0 {
                do {
                    try due.task()
                } catch {
                    logger.error("task failed", ("error", "\(error)"))
                }
            }
        }
    }

    private func nextTimeout() -> Int {
        let asked = dueTasks.compactMap { $0.milliseconds() }.min()
        guard let due = timers.map(\.due).min() else { return asked ?? -1 }
        let left = ContinuousClock.now.duration(to: due)
        if left <= .zero { return 0 }
        let (seconds, attoseconds) = left.components
        let timer = Int(seconds) * 1_000 + Int(attoseconds / 1_000_000_000_000_000) + 1
        return min(timer, asked ?? timer)
    }

    private func runDueTimers() {
        let now = ContinuousClock.now
        for index in timers.indices where timers[index].due <= now {
            timers[index].due = now + timers[index].interval
            do {
                try timers[index].task()
            } catch {
                logger.error("timer failed", ("error", "\(error)"))
            }
        }
    }
}
