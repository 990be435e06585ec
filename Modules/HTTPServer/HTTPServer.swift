import CMicroHTTPD
import Foundation
import Synchronization

/// One HTTP request, with its body read whole.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path, without the query.
    public var path: String
    /// Header names lowercased.
    public var headers: [String: String]
    /// Query arguments; a key given without a value (`?direct`) maps to "".
    public var query: [String: String]
    public var body: Data
    /// More than the server's body limit arrived; `body` holds only the start.
    public var bodyTooLarge: Bool
    public var isTLS: Bool

    public func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// A request as the server hands it over; for running handlers in process. Header names lowercased.
    public init(
        method: String, path: String, headers: [String: String] = [:], query: [String: String] = [:], body: Data = Data(),
        bodyTooLarge: Bool = false, isTLS: Bool = false
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.query = query
        self.body = body
        self.bodyTooLarge = bodyTooLarge
        self.isTLS = isTLS
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: Data
    /// When set, the body is not `body` but whatever is written to the stream until it is
    /// finished or the client goes away (chunked, as server-sent events need).
    public var stream: HTTPStream?

    /// What a request still waiting gets when the server stops: 503, to be tried again in a second.
    public static let unavailable = HTTPResponse(status: 503, headers: [("Retry-After", "1")])

    public init(status: Int, headers: [(String, String)] = [], body: Data = Data(), stream: HTTPStream? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.stream = stream
    }
}

/// A response body written over time from any thread. While nothing is waiting to be sent, its
/// connection is suspended, so an open stream costs no polling and holds no thread.
public final class HTTPStream: @unchecked Sendable {
    private let lock = NSLock()
    private var pending = Data()
    private var finishing = false
    private var ended = false
    private var suspended = false
    fileprivate var connection: OpaquePointer?
    /// Wakes the server's poller after a resume, when the caller polls.
    fileprivate var wakeServer: (@Sendable () -> Void)?
    /// Set when the server stops: the stream then ends rather than waiting suspended.
    fileprivate var serverStopping: (@Sendable () -> Bool)?
    private var endHandlers: [@Sendable () -> Void] = []

    public init() {}

    /// Queues bytes to send. False when the stream has ended or is finishing; the bytes are dropped.
    @discardableResult
    public func write(_ data: Data) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !ended, !finishing else { return false }
        pending.append(data)
        wake()
        return true
    }

    /// Ends the body once what is queued has gone out.
    public func finish() {
        lock.lock()
        defer { lock.unlock() }
        finishing = true
        wake()
    }

    /// Bytes queued but not yet taken by the connection: a client that reads too slowly shows here.
    public var queuedBytes: Int {
        lock.lock()
        defer { lock.unlock() }
        return pending.count
    }

    fileprivate var hasEnded: Bool {
        lock.lock()
        defer { lock.unlock() }
        return ended
    }

    public var isOpen: Bool {
        lock.lock()
        defer { lock.unlock() }
        return !ended && !finishing
    }

    /// Runs `handler` once, when the connection ends: finished, closed by the client, or the server stopping.
    public func onEnd(_ handler: @escaping @Sendable () -> Void) {
        lock.lock()
        if ended {
            lock.unlock()
            handler()
            return
        }
        endHandlers.append(handler)
        lock.unlock()
    }

    /// Called with the lock held.
    private func wake() {
        if suspended, let connection {
            suspended = false
            MHD_resume_connection(connection)
            wakeServer?()
        }
    }

    /// libmicrohttpd asks for the next bytes: give what is queued, end, or suspend until a write.
    fileprivate func read(into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        lock.lock()
        defer { lock.unlock() }
        if !pending.isEmpty {
            let count = min(max, pending.count)
            pending.withUnsafeBytes { bytes in
                UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress!, byteCount: count)
            }
            pending.removeSubrange(0..<count)
            return count
        }
        if finishing || ended || serverStopping?() == true { return -1 }  // MHD_CONTENT_READER_END_OF_STREAM
        if let connection {
            suspended = true
            MHD_suspend_connection(connection)
        }
        return 0
    }

    fileprivate func end() {
        lock.lock()
        ended = true
        suspended = false
        connection = nil
        pending = Data()
        let handlers = endHandlers
        endHandlers = []
        lock.unlock()
        for handler in handlers { handler() }
    }

    static let reader: MHD_ContentReaderCallback = { cls, _, buffer, max in
        guard let cls, let buffer else { return -2 }
        return Unmanaged<HTTPStream>.fromOpaque(cls).takeUnretainedValue().read(into: buffer, max: max)
    }

    static let released: MHD_ContentReaderFreeCallback = { cls in
        guard let cls else { return }
        let stream = Unmanaged<HTTPStream>.fromOpaque(cls).takeRetainedValue()
        stream.end()
    }
}

/// An HTTP server on libmicrohttpd (plain, or TLS through its GnuTLS support).
///
/// The connections are read and written either by libmicrohttpd's own threads, or by the
/// caller's loop (`callerPolls`): it watches `fileDescriptor`, and calls `run()` when that is
/// readable and when `timeoutMilliseconds` has run out.
///
/// A complete request goes first to `inline`, if given, on the thread that read it. It may take
/// the request and answer it later through its `HTTPReply`, from any thread: a handler that sends
/// a request to another service and is called back with the reply, so that no thread waits.
/// Any other request is handed to one of `Limits.workers` worker threads. Either way its
/// connection is suspended until the answer is ready, so a handler that waits holds up no other
/// connection. The worker's handler gets the worker's index, so each worker can keep state of its
/// own without locks.
public final class HTTPServer: @unchecked Sendable {
    public typealias Handler = @Sendable (HTTPRequest, _ worker: Int) -> HTTPResponse
    /// Takes a request on the polling thread and answers it through the reply (true), or leaves
    /// it to the workers (false). It must not wait: every connection shares the polling thread.
    /// When libmicrohttpd's own threads poll, it is called on any of them, at once.
    public typealias Inline = (HTTPRequest, HTTPReply) -> Bool

    private var daemon: OpaquePointer?
    let handler: Handler
    let inline: Inline?
    /// No thread of libmicrohttpd's reads the connections: the caller's loop runs it.
    public let callerPolls: Bool
    let maxBodyBytes: Int
    let isTLS: Bool
    public private(set) var port: UInt16 = 0

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// How many requests are handled at once, and how connections are bounded.
    public struct Limits: Sendable {
        /// Threads that run the handler: requests handled at once.
        public var workers = 8
        /// libmicrohttpd's threads, which read and write connections, unless the caller polls.
        public var ioThreads = 2
        public var connections = 10_000
        public var connectionsPerAddress = 256
        public var idleSeconds = 30

        public init(workers: Int = 8, ioThreads: Int = 2, connections: Int = 10_000, connectionsPerAddress: Int = 256, idleSeconds: Int = 30) {
            self.workers = workers
            self.ioThreads = ioThreads
            self.connections = connections
            self.connectionsPerAddress = connectionsPerAddress
            self.idleSeconds = idleSeconds
        }
    }

    private let queue: WorkQueue

    public init(address: String, port: UInt16, tls: (key: String, certificate: String)? = nil, maxBodyBytes: Int,
                limits: Limits = Limits(), callerPolls: Bool = false, inline: Inline? = nil, handler: @escaping Handler) throws {
        self.handler = handler
        self.inline = inline
        self.callerPolls = callerPolls
        self.maxBodyBytes = maxBodyBytes
        isTLS = tls != nil
        queue = WorkQueue(workers: max(limits.workers, 1), handler: handler)
        let context = Unmanaged.passUnretained(self).toOpaque()
        daemon = nh_mhd_start(
            address, port, HTTPServer.access, context, HTTPServer.completed, tls?.key, tls?.certificate,
            callerPolls ? 0 : UInt32(max(limits.ioThreads, 1)), UInt32(max(limits.connections, 1)),
            UInt32(max(limits.connectionsPerAddress, 1)), UInt32(max(limits.idleSeconds, 1)))
        guard let daemon else {
            throw Failure(description: "cannot listen on \(address):\(port) (in use, or a bad address or TLS key and certificate)")
        }
        self.port = nh_mhd_port(daemon)
        if callerPolls {
            var event: Int32 = -1
            fileDescriptor = nh_poll_set(nh_mhd_epoll_fd(daemon), &event)
            wakeDescriptor = event
            guard fileDescriptor >= 0 else {
                MHD_stop_daemon(daemon)
                self.daemon = nil
                throw Failure(description: "cannot make the descriptors to poll \(address):\(port) with")
            }
        }
    }

    deinit {
        stop()
        if fileDescriptor >= 0 { close(fileDescriptor) }
        if wakeDescriptor >= 0 { close(wakeDescriptor) }
    }

    /// What the caller's loop watches when it polls: readable when `run()` has work. -1 when
    /// libmicrohttpd's own threads poll.
    public private(set) var fileDescriptor: Int32 = -1
    /// Written on every resume, from any thread, so that the caller's loop runs the server.
    private var wakeDescriptor: Int32 = -1

    /// Makes `fileDescriptor` readable, after a connection is resumed: once until `run()` next
    /// begins, however many connections resume meanwhile.
    fileprivate func wake() {
        guard wakeDescriptor >= 0, !woken.exchange(true, ordering: .acquiringAndReleasing) else { return }
        nh_poll_wake(wakeDescriptor)
    }

    /// A wake is written and not yet drained. Cleared as `run()` begins, before libmicrohttpd
    /// looks at the connections, so a resume after that writes again and none is missed. Each
    /// `run()` then costs no read of the descriptor unless a wake came.
    private let woken = Atomic<Bool>(false)

    /// Reads, writes and answers what is ready, on the caller's loop (`callerPolls`). Runs again
    /// while libmicrohttpd has work left that its descriptor would not show (bytes already read),
    /// a bounded number of times; `timeoutMilliseconds` then says 0.
    public func run() {
        guard callerPolls, let daemon else { return }
        // Drained, then cleared by a read-modify-write: a wake that came meanwhile found the flag
        // set and wrote nothing, and the exchange, ordered after it, makes its resumed connection
        // visible to the run below. A wake after the exchange writes again. A wake whose flag is
        // set but whose write has not landed yet leaves the flag set: its write, when it lands,
        // brings the loop here again to read it, so the descriptor never stays readable unread.
        if woken.load(ordering: .acquiring), nh_poll_drain(wakeDescriptor) != 0 {
            _ = woken.exchange(false, ordering: .acquiringAndReleasing)
        }
        for _ in 0..<16 {
            _ = MHD_run(daemon)
            guard nh_mhd_timeout(daemon) == 0 else { return }
        }
    }

    /// Milliseconds until `run()` is due whatever the descriptor shows (an idle connection to
    /// close, work left over); nil for no limit.
    public var timeoutMilliseconds: Int? {
        guard callerPolls, let daemon else { return nil }
        let timeout = nh_mhd_timeout(daemon)
        return timeout < 0 ? nil : Int(timeout)
    }

    /// Stops taking requests, answers those still waiting (503), ends open streams, and closes
    /// every connection. When the caller polls, call this on its loop's thread.
    public func stop() {
        guard !stopping.exchange(true, ordering: .sequentiallyConsistent) else { return }
        // Open streams end, and every request still awaiting its answer gets one (the workers
        // finish what they run; the rest is 503), so that no connection is left suspended when
        // the daemon stops. Then the answers go out, for at most 2 s.
        let awaited = replies.withLock { Array($0.values) }
        queue.stop()
        let open = streams.withLock { streams in
            defer { streams.removeAll() }
            return Array(streams.values)
        }
        for stream in open { stream.finish() }
        for reply in awaited { reply.send(.unavailable) }
        replies.withLock { $0.removeAll() }
        let deadline = Date().addingTimeInterval(2)
        repeat {
            run()
            let waiting = open.contains(where: { !$0.hasEnded }) || awaited.contains(where: { !$0.isFinished })
            guard waiting && Date() < deadline else { break }
            usleep(10_000)
        } while true
        run()
        resumeLock.withLock { daemonGone = true }
        if let daemon { MHD_stop_daemon(daemon) }
        daemon = nil
    }

    /// Replies not yet sent, so that `stop` can answer them.
    private let replies = Mutex<[ObjectIdentifier: HTTPReply]>([:])
    /// Held while a reply resumes its connection; `daemonGone` is set under it before the daemon
    /// stops, so that no reply resumes a connection the daemon has closed.
    fileprivate let resumeLock = NSLock()
    fileprivate var daemonGone = false

    fileprivate func settled(_ reply: HTTPReply) {
        _ = replies.withLock { $0.removeValue(forKey: ObjectIdentifier(reply)) }
    }

    private let streams = Mutex<[ObjectIdentifier: HTTPStream]>([:])
    private let stopping = Atomic<Bool>(false)

    /// Streams being served, so that `stop` can end them; one that starts while the server stops ends at once.
    fileprivate func track(_ stream: HTTPStream) {
        let id = ObjectIdentifier(stream)
        stream.serverStopping = { [weak self] in self?.stopping.load(ordering: .sequentiallyConsistent) ?? true }
        stream.wakeServer = { [weak self] in self?.wake() }
        streams.withLock { $0[id] = stream }
        if stopping.load(ordering: .sequentiallyConsistent) { stream.finish() }
        stream.onEnd { [weak self] in _ = self?.streams.withLock { $0.removeValue(forKey: id) } }
    }

    /// What one connection's request has gathered between calls, and its answer once a worker has it.
    final class Pending: @unchecked Sendable {
        /// The request is over: its answer went out, or its connection closed.
        let finished = Atomic<Bool>(false)
        var body = Data()
        var tooLarge = false
        var dispatched = false
        var response: HTTPResponse?
    }

    static let access: nh_access_handler = { cls, connection, url, method, _, upload, uploadSize, state in
        guard let cls, let connection, let uploadSize, let state else { return MHD_Result.NO }
        let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        guard let existing = state.pointee else {
            state.pointee = Unmanaged.passRetained(Pending()).toOpaque()
            return MHD_Result.YES
        }
        let pending = Unmanaged<Pending>.fromOpaque(existing).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            if let upload, pending.body.count + uploadSize.pointee <= server.maxBodyBytes {
                pending.body.append(UnsafeRawPointer(upload).assumingMemoryBound(to: UInt8.self), count: uploadSize.pointee)
            } else {
                pending.tooLarge = true
            }
            uploadSize.pointee = 0
            return MHD_Result.YES
        }
        guard let response = pending.response else {
            guard !pending.dispatched else { return MHD_Result.YES }
            // The whole request is in: a worker answers it while the connection waits, suspended.
            pending.dispatched = true
            let request = HTTPRequest(
                method: method.map { String(cString: $0) } ?? "GET", path: url.map { String(cString: $0) } ?? "/",
                headers: values(connection, MHD_ValueKind.HEADER_KIND, lowercase: true),
                query: values(connection, MHD_ValueKind.GET_ARGUMENT_KIND, lowercase: false),
                body: pending.body, bodyTooLarge: pending.tooLarge, isTLS: server.isTLS)
            MHD_suspend_connection(connection)
            let reply = HTTPReply(pending: pending, connection: connection, server: server)
            server.replies.withLock { $0[ObjectIdentifier(reply)] = reply }
            if server.stopping.load(ordering: .sequentiallyConsistent) {
                reply.send(.unavailable)
            } else if server.inline?(request, reply) != true {
                server.queue.submit(request) { reply.send($0) }
            }
            return MHD_Result.YES
        }
        if let stream = response.stream {
            stream.connection = connection
            server.track(stream)
            guard let reply = MHD_create_response_from_callback(
                UInt64.max, 16 * 1024, HTTPStream.reader, Unmanaged.passRetained(stream).toOpaque(), HTTPStream.released)
            else { return MHD_Result.NO }
            defer { MHD_destroy_response(reply) }
            for (name, value) in response.headers { MHD_add_response_header(reply, name, value) }
            return MHD_queue_response(connection, UInt32(response.status), reply)
        }
        return response.body.withUnsafeBytes { bytes -> MHD_Result in
            guard let reply = MHD_create_response_from_buffer(
                bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), MHD_ResponseMemoryMode.RESPMEM_MUST_COPY)
            else { return MHD_Result.NO }
            defer { MHD_destroy_response(reply) }
            for (name, value) in response.headers { MHD_add_response_header(reply, name, value) }
            return MHD_queue_response(connection, UInt32(response.status), reply)
        }
    }

    static let completed: MHD_RequestCompletedCallback = { _, _, state, _ in
        guard let state, let pointer = state.pointee else { return }
        Unmanaged<Pending>.fromOpaque(pointer).takeUnretainedValue().finished.store(true, ordering: .releasing)
        Unmanaged<Pending>.fromOpaque(pointer).release()
        state.pointee = nil
    }

    final class Collector {
        var values: [String: String] = [:]
        let lowercase: Bool
        init(lowercase: Bool) { self.lowercase = lowercase }
    }

    static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind, lowercase: Bool) -> [String: String] {
        let collector = Collector(lowercase: lowercase)
        let context = Unmanaged.passUnretained(collector).toOpaque()
        _ = MHD_get_connection_values(connection, kind, { cls, _, key, value in
            guard let cls, let key else { return MHD_Result.YES }
            let collector = Unmanaged<Collector>.fromOpaque(cls).takeUnretainedValue()
            let name = String(cString: key)
            collector.values[collector.lowercase ? name.lowercased() : name] = value.map { String(cString: $0) } ?? ""
            return MHD_Result.YES
        }, context)
        return collector.values
    }
}


/// The answer to one request, sent once from any thread: its connection, suspended until then,
/// is resumed (libmicrohttpd allows that from any thread). A second answer is dropped, as is one
/// after the server has answered the request itself on stopping, or has stopped.
public final class HTTPReply: @unchecked Sendable {
    private let pending: HTTPServer.Pending
    private let connection: OpaquePointer
    private weak var server: HTTPServer?
    /// Read and set under the server's `resumeLock`.
    private var sent = false

    init(pending: HTTPServer.Pending, connection: OpaquePointer, server: HTTPServer) {
        self.pending = pending
        self.connection = connection
        self.server = server
    }

    /// The answer has gone out, or the connection closed.
    var isFinished: Bool { pending.finished.load(ordering: .acquiring) }

    public func send(_ response: HTTPResponse) {
        guard let server else { return }
        server.resumeLock.lock()
        defer { server.resumeLock.unlock() }
        guard !server.daemonGone, !sent else { return }
        sent = true
        pending.response = response
        server.settled(self)
        MHD_resume_connection(connection)
        server.wake()
    }
}

/// Worker threads that take requests in order of arrival.
final class WorkQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [(HTTPRequest, @Sendable (HTTPResponse) -> Void)] = []
    private var head = 0
    private var stopping = false
    private var threads: [Thread] = []

    private let finished = DispatchGroup()

    init(workers: Int, handler: @escaping HTTPServer.Handler) {
        for worker in 0..<workers {
            finished.enter()
            let thread = Thread { [unowned self] in
                while let (request, done) = self.next() { done(handler(request, worker)) }
                self.finished.leave()
            }
            thread.name = "http-\(worker)"
            thread.stackSize = 1 << 20
            threads.append(thread)
            thread.start()
        }
    }

    func submit(_ request: HTTPRequest, done: @escaping @Sendable (HTTPResponse) -> Void) {
        condition.lock()
        if stopping {
            condition.unlock()
            done(.unavailable)
            return
        }
        jobs.append((request, done))
        condition.signal()
        condition.unlock()
    }

    private func next() -> (HTTPRequest, @Sendable (HTTPResponse) -> Void)? {
        condition.lock()
        defer { condition.unlock() }
        while head == jobs.count && !stopping { condition.wait() }
        if stopping { return nil }
        let job = jobs[head]
        head += 1
        if head > 1_024 && head * 2 > jobs.count {
            jobs.removeFirst(head)
            head = 0
        }
        return job
    }

    /// Answers what is still waiting with 503 and waits for the workers to finish what they run,
    /// so that no connection is left suspended.
    func stop() {
        condition.lock()
        stopping = true
        let waiting = jobs[head...]
        jobs.removeAll()
        head = 0
        condition.broadcast()
        condition.unlock()
        for (_, done) in waiting { done(.unavailable) }
        finished.wait()
    }
}
