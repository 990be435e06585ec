import Foundation
import HTTPServer
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A plain TCP client on loopback, for requests a library would not send (oversized, malformed)
/// and for reading exactly what the server writes.
final class RawClient {
    let fd: Int32

    init(port: UInt16) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
    }

    deinit { close(fd) }

    func send(_ text: String) { send(Data(text.utf8)) }

    func send(_ data: Data) {
        _ = data.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, data.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Reads until `done` says the bytes so far are enough, the peer closes, or 10 s pass.
    func read(until done: (String) -> Bool = { _ in false }) -> String {
        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !done(String(decoding: received, as: UTF8.self)) {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            received.append(contentsOf: buffer[0..<count])
        }
        return String(decoding: received, as: UTF8.self)
    }

    /// One whole response with a Content-Length body.
    func response() -> String {
        read { text in
            guard let end = text.range(of: "\r\n\r\n") else { return false }
            let head = text[..<end.lowerBound].lowercased()
            guard let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
                let length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
            else { return true }
            return text.utf8.count - text[..<end.upperBound].utf8.count >= length
        }
    }
}

/// Who reads the connections: libmicrohttpd's threads, or a loop of the caller's.
enum Polling: CaseIterable, CustomStringConvertible {
    case ownThreads, caller
    var description: String { self == .caller ? "polled by the caller" : "on its own threads" }
}

/// A server under test, with the loop that polls it when the caller polls: a thread that waits on
/// its descriptor, no longer than the server asks (so that a resume the server does not signal
/// would hang), and runs it; a pipe ends the wait when the test stops.
final class Served: @unchecked Sendable {
    let server: HTTPServer
    private let done = Atomic<Bool>(false)
    /// Times the loop has run the server: a descriptor left readable would make it spin.
    let turns = Atomic<Int>(0)
    private let exited = DispatchSemaphore(value: 0)
    private var stopped = false
    private var stopPipe: [Int32] = [-1, -1]

    init(_ server: HTTPServer) {
        self.server = server
        guard server.callerPolls else { return }
        _ = pipe(&stopPipe)
        Thread { [self] in
            while !done.load(ordering: .sequentiallyConsistent) {
                var descriptors = [
                    pollfd(fd: server.fileDescriptor, events: Int16(POLLIN), revents: 0),
                    pollfd(fd: stopPipe[0], events: Int16(POLLIN), revents: 0),
                ]
                _ = poll(&descriptors, 2, Int32(server.timeoutMilliseconds ?? -1))
                server.run()
                turns.add(1, ordering: .relaxed)
            }
            exited.signal()
        }.start()
    }

    var port: UInt16 { server.port }

    /// Stops the polling loop, then the server, so that the server stops on the thread that last polled it.
    func stop() {
        guard !stopped else { return }
        stopped = true
        if server.callerPolls {
            done.store(true, ordering: .sequentiallyConsistent)
            var byte: UInt8 = 1
            _ = write(stopPipe[1], &byte, 1)
            exited.wait()
            for end in stopPipe { close(end) }
        }
        server.stop()
    }
}

/// The HTTP server in process, on a loopback port of its own, polled by its own threads and by the
/// caller: what a handler gets, the limits on what a client may send, connections kept and
/// refused, streamed answers, and requests answered later without a worker.
@Suite("HTTP server")
struct HTTPServerTests {
    static func server(
        _ polling: Polling, maxBodyBytes: Int = 1_024, limits: HTTPServer.Limits = HTTPServer.Limits(workers: 2),
        inline: HTTPServer.Inline? = nil, handler: @escaping HTTPServer.Handler
    ) throws -> Served {
        Served(try HTTPServer(
            address: "127.0.0.1", port: 0, maxBodyBytes: maxBodyBytes, limits: limits, callerPolls: polling == .caller, inline: inline,
            handler: handler))
    }

    static func echo(_ request: HTTPRequest, _ worker: Int) -> HTTPResponse {
        let summary = "\(request.method) \(request.path) q=\(request.query.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "&")) "
            + "h=\(request.header("X-Thing") ?? "-") body=\(request.body.count) tooLarge=\(request.bodyTooLarge)"
        return HTTPResponse(status: 200, headers: [("Content-Type", "text/plain")], body: Data(summary.utf8))
    }

    @Test("a request reaches the handler whole: method, path, query (a key without value too), headers by any case, body", arguments: Polling.allCases)
    func request(_ polling: Polling) throws {
        let server = try Self.server(polling, handler: Self.echo)
        defer { server.stop() }
        let client = try RawClient(port: server.port)
        client.send("POST /hub/messages?direct&api-version=2015-01 HTTP/1.1\r\nHost: x\r\nx-THING: yes\r\nContent-Length: 5\r\n\r\nhello")
        let answer = client.response()
        #expect(answer.hasPrefix("HTTP/1.1 200"))
        #expect(answer.hasSuffix("POST /hub/messages q=api-version=2015-01&direct= h=yes body=5 tooLarge=false"))
        // The connection is kept for the next request.
        client.send("GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(client.response().hasSuffix("GET /again q= h=- body=0 tooLarge=false"))
    }

    @Test("a body over the limit reaches the handler marked, with its start only; oversized heads and bad requests are refused by the server", arguments: Polling.allCases)
    func limits(_ polling: Polling) throws {
        let server = try Self.server(polling, maxBodyBytes: 100, handler: Self.echo)
        defer { server.stop() }
        let big = try RawClient(port: server.port)
        big.send("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + String(repeating: "a", count: 1_000))
        let answer = big.response()
        #expect(answer.contains("tooLarge=true"), "\(answer.suffix(80))")
        #expect(!answer.contains("body=1000"))

        let headers = try RawClient(port: server.port)
        headers.send("GET / HTTP/1.1\r\nHost: x\r\nX-Huge: \(String(repeating: "h", count: 64_000))\r\n\r\n")
        let refused = headers.read { $0.contains("\r\n\r\n") }
        #expect(refused.hasPrefix("HTTP/1.1 431") || refused.hasPrefix("HTTP/1.1 414") || refused.hasPrefix("HTTP/1.1 413"), "\(refused.prefix(40))")

        let garbage = try RawClient(port: server.port)
        garbage.send("NONSENSE\r\n\r\n")
        let bad = garbage.read { $0.contains("\r\n\r\n") }
        #expect(bad.isEmpty || bad.hasPrefix("HTTP/1.1 400") || bad.hasPrefix("HTTP/1.1 505"), "\(bad.prefix(40))")
    }

    @Test("connections from one address beyond the limit are closed at once; the ones held still answer", arguments: Polling.allCases)
    func connections(_ polling: Polling) throws {
        let server = try Self.server(polling, limits: HTTPServer.Limits(workers: 2, connections: 100, connectionsPerAddress: 2), handler: Self.echo)
        defer { server.stop() }
        let held = try (0..<2).map { _ in try RawClient(port: server.port) }
        for client in held { client.send("GET /held HTTP/1.1\r\nHost: x\r\n\r\n") }
        for client in held { #expect(client.response().hasPrefix("HTTP/1.1 200")) }
        let third = try RawClient(port: server.port)
        third.send("GET /third HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(third.read().isEmpty, "the third connection is closed without an answer")
        held[0].send("GET /still HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(held[0].response().hasSuffix("GET /still q= h=- body=0 tooLarge=false"))
    }

    @Test("a handler that waits holds up only its own connection", arguments: Polling.allCases)
    func workers(_ polling: Polling) throws {
        let release = Mutex(false)
        let server = try Self.server(polling, limits: HTTPServer.Limits(workers: 2)) { request, worker in
            if request.path == "/slow" {
                let deadline = Date().addingTimeInterval(10)
                while !release.withLock({ $0 }), Date() < deadline { usleep(1_000) }
            }
            return Self.echo(request, worker)
        }
        defer { server.stop() }
        let slow = try RawClient(port: server.port)
        slow.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        let fast = try RawClient(port: server.port)
        fast.send("GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(fast.response().hasSuffix("GET /fast q= h=- body=0 tooLarge=false"))
        release.withLock { $0 = true }
        #expect(slow.response().hasSuffix("GET /slow q= h=- body=0 tooLarge=false"))
    }

    @Test("a streamed answer goes out as it is written, suspended in between; its end is heard when the client leaves", arguments: Polling.allCases)
    func streams(_ polling: Polling) throws {
        let stream = HTTPStream()
        let ended = Atomic<Bool>(false)
        stream.onEnd { ended.store(true, ordering: .sequentiallyConsistent) }
        let server = try Self.server(polling) { _, _ in
            HTTPResponse(status: 200, headers: [("Content-Type", "text/event-stream")], stream: stream)
        }
        defer { server.stop() }
        let client = try RawClient(port: server.port)
        client.send("GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(client.read { $0.contains("\r\n\r\n") }.hasPrefix("HTTP/1.1 200"))
        #expect(stream.write(Data("data: one\n\n".utf8)))
        #expect(client.read { $0.contains("data: one") }.contains("data: one"))
        // Nothing queued: the connection waits, suspended, and wakes for the next write.
        usleep(100_000)
        #expect(stream.write(Data("data: two\n\n".utf8)))
        #expect(client.read { $0.contains("data: two") }.contains("data: two"))
        let endedEarly = ended.load(ordering: .sequentiallyConsistent)
        #expect(stream.isOpen && !endedEarly)
        stream.finish()
        #expect(!stream.write(Data("late".utf8)), "nothing is taken after finish")
        // The chunked body's last chunk.
        #expect(client.read { $0.hasSuffix("0\r\n\r\n") }.hasSuffix("0\r\n\r\n"))
        let deadline = Date().addingTimeInterval(10)
        while !ended.load(ordering: .sequentiallyConsistent), Date() < deadline { usleep(10_000) }
        let endedAtLast = ended.load(ordering: .sequentiallyConsistent)
        #expect(endedAtLast)
    }

    @Test("stopping the server ends open streams", arguments: Polling.allCases)
    func stopEndsStreams(_ polling: Polling) throws {
        let stream = HTTPStream()
        let server = try Self.server(polling) { _, _ in HTTPResponse(status: 200, stream: stream) }
        let client = try RawClient(port: server.port)
        client.send("GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = client.read { $0.contains("\r\n\r\n") }
        server.stop()
        #expect(!stream.isOpen)
    }

    @Test("a request taken inline is answered later through its reply, from another thread, while other connections go on", arguments: Polling.allCases)
    func inline(_ polling: Polling) throws {
        let held = Mutex<HTTPReply?>(nil)
        let server = try Self.server(polling, inline: { request, reply in
            switch request.path {
            case "/later":
                held.withLock { $0 = reply }
                return true
            case "/now":
                reply.send(HTTPResponse(status: 202, body: Data("now".utf8)))
                return true
            default:
                return false
            }
        }, handler: Self.echo)
        defer { server.stop() }
        let later = try RawClient(port: server.port)
        later.send("POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
        let now = try RawClient(port: server.port)
        now.send("GET /now HTTP/1.1\r\nHost: x\r\n\r\n")
        let answeredNow = now.response()
        #expect(answeredNow.hasPrefix("HTTP/1.1 202") && answeredNow.hasSuffix("now"), "\(answeredNow)")
        // What inline leaves goes to a worker.
        now.send("GET /worker HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(now.response().hasSuffix("GET /worker q= h=- body=0 tooLarge=false"))
        let deadline = Date().addingTimeInterval(10)
        while held.withLock({ $0 == nil }), Date() < deadline { usleep(1_000) }
        let reply = try #require(held.withLock { $0 })
        // Answered from this thread: the connection resumes and the poller wakes for it.
        Thread.sleep(forTimeInterval: 0.1)
        reply.send(HTTPResponse(status: 201, headers: [("Location", "/there")]))
        reply.send(HTTPResponse(status: 500))
        let answer = later.response()
        #expect(answer.hasPrefix("HTTP/1.1 201") && answer.contains("Location: /there"), "\(answer)")
        // The connection is kept, and the second answer to the same reply was dropped.
        later.send("GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(later.response().hasSuffix("GET /again q= h=- body=0 tooLarge=false"))
    }

    @Test("answers sent from other threads, many at once, each wake the poller: none waits for a later one", arguments: Polling.allCases)
    func answersFromOtherThreadsAllWake(_ polling: Polling) throws {
        let server = try Self.server(polling, inline: { request, reply in
            // Answered on another thread a moment later, as a reply from another service would be.
            DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(Int.random(in: 0..<300))) {
                reply.send(HTTPResponse(status: 200, body: Data(request.path.utf8)))
            }
            return true
        }, handler: Self.echo)
        defer { server.stop() }
        let answered = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 8) { connection in
            guard let client = try? RawClient(port: server.port) else { return }
            for index in 0..<200 {
                client.send("GET /c\(connection)-\(index) HTTP/1.1\r\nHost: x\r\n\r\n")
                // A wake lost would leave this answer waiting until the client's 10 s timeout.
                guard client.response().hasSuffix("/c\(connection)-\(index)") else { return }
                answered.withLock { $0 += 1 }
            }
        }
        #expect(answered.withLock { $0 } == 1_600)
        // Once all is answered, the loop is quiet: no wake is left unread on its descriptor.
        Thread.sleep(forTimeInterval: 0.2)
        let before = server.turns.load(ordering: .relaxed)
        Thread.sleep(forTimeInterval: 0.3)
        #expect(server.turns.load(ordering: .relaxed) - before < 1_000, "the loop spins with nothing to do")
    }

    @Test("stopping the server answers replies still awaited with 503; a reply sent after is dropped", arguments: Polling.allCases)
    func stopAnswersAwaited(_ polling: Polling) throws {
        let held = Mutex<HTTPReply?>(nil)
        let server = try Self.server(polling, inline: { _, reply in
            held.withLock { $0 = reply }
            return true
        }, handler: Self.echo)
        let client = try RawClient(port: server.port)
        client.send("GET /never HTTP/1.1\r\nHost: x\r\n\r\n")
        let deadline = Date().addingTimeInterval(10)
        while held.withLock({ $0 == nil }), Date() < deadline { usleep(1_000) }
        server.stop()
        #expect(client.read { $0.contains("\r\n\r\n") }.hasPrefix("HTTP/1.1 503"))
        // The connection is gone with the daemon: a late answer resumes nothing.
        held.withLock { $0 }?.send(HTTPResponse(status: 200))
    }
}
