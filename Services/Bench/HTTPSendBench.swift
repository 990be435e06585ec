import Auth
import Foundation
import HubProtocol
import ServiceKit
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Template sends accepted through the REST gateway beside the same sends over the bus, in one
/// run against the same services: C clients at once each way, every send durable before its reply.
enum HTTPSendBench {
    static func run(sends: Int, clients: Int = 8) throws -> [BenchResult] {
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        let port = try freePort()
        cluster.environment["NH_GATEWAY_LISTEN"] = "127.0.0.1:\(port)"
        try cluster.startServices()
        _ = try cluster.start("nh-gateway")
        let credential = try cluster.credential()
        let token = SharedAccessSignature.sign(
            resource: "http://127.0.0.1:\(port)/hub", keyName: credential.keyName, key: credential.key,
            expiry: Int(Date().timeIntervalSince1970) + 3_600)
        let deadline = Date().addingTimeInterval(30)
        while (try? HTTPConnection(port: port).status(of: request(port: port, token: token, index: -1))) != 201 {
            guard Date() < deadline else { throw ConfigError("the gateway did not accept a send within 30 s") }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let publish = cluster.environment["NH_PUBLISH_REQUESTS"]!
        let busSecurity = cluster.bus

        // Alternately, so that neither way runs on a warmer machine than the other.
        var bus = (count: 0, seconds: 0.0), http = (count: 0, seconds: 0.0)
        for round in 0..<2 {
            let busRound = measure(sends: sends / 2, clients: clients) { _ in
                // Signed once, as the HTTP clients' token is, so that neither way pays for signing per send.
                let client = try HubCluster.client(publish, credential: credential, bus: busSecurity)
                let busToken = credential.token(for: "http://127.0.0.1:7780/hub")
                client.auth = { busToken }
                return { index in
                    (try? client.call(SendNotification(
                        format: .template, properties: ["messageParam": "bus \(round) \(index)"], tagExpression: "HttpBench"))) != nil
                }
            }
            let httpRound = measure(sends: sends / 2, clients: clients) { _ in
                let connection = try HTTPConnection(port: port)
                return { index in (try? connection.status(of: request(port: port, token: token, index: index))) == 201 }
            }
            bus = (bus.count + busRound.count, bus.seconds + busRound.seconds)
            http = (http.count + httpRound.count, http.seconds + httpRound.seconds)
        }
        return [
            BenchResult(
                name: "template sends accepted over the bus", unit: "send/s", count: bus.count, seconds: bus.seconds,
                note: "\(bus.count) sends, \(clients) clients, durable"),
            BenchResult(
                name: "template sends accepted over HTTP", unit: "send/s", count: http.count, seconds: http.seconds,
                baseline: "template sends accepted over the bus",
                note: "\(http.count) sends, \(clients) keep-alive connections to nh-gateway, durable; goal 0.7×"),
        ]
    }

    /// Runs `sends` calls over `clients` threads, each with the sender `make` gives it.
    static func measure(sends: Int, clients: Int, make: @escaping @Sendable (Int) throws -> (Int) -> Bool) -> (count: Int, seconds: Double) {
        let accepted = Mutex(0)
        let ready = DispatchGroup()
        let done = DispatchGroup()
        let go = DispatchSemaphore(value: 0)
        for thread in 0..<clients {
            ready.enter()
            done.enter()
            Thread {
                defer { done.leave() }
                let send = try? make(thread)
                ready.leave()
                go.wait()
                guard let send else { return }
                var mine = 0
                for index in stride(from: thread, to: sends, by: clients) where send(index) { mine += 1 }
                accepted.withLock { $0 += mine }
            }.start()
        }
        ready.wait()
        let start = ContinuousClock.now
        for _ in 0..<clients { go.signal() }
        done.wait()
        return (accepted.withLock { $0 }, seconds(since: start))
    }

    static func request(port: Int, token: String, index: Int) -> Data {
        let body = #"{"messageParam":"http \#(index)"}"#
        return Data((
            "POST /hub/messages?api-version=2015-01 HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: \(token)\r\n"
                + "ServiceBusNotification-Format: template\r\nServiceBusNotification-Tags: HttpBench\r\n"
                + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)").utf8)
    }

    static func freePort() throws -> Int {
        let endpoint = try HubCluster.freeEndpoint()
        return Int(endpoint.split(separator: ":").last ?? "") ?? 0
    }
}

/// One keep-alive HTTP/1.1 connection on a blocking socket: writes a request, reads the status line,
/// the headers and a Content-Length body. Just enough to load the gateway from the benchmark.
final class HTTPConnection {
    private let socket: Int32
    private var buffer = [UInt8]()

    init(port: Int) throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var one: Int32 = 1
        setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(socket)
            throw ConfigError("cannot connect to 127.0.0.1:\(port)")
        }
    }

    deinit { close(socket) }

    /// Sends one request and returns the response's status code.
    func status(of request: Data) throws -> Int {
        try request.withUnsafeBytes { bytes in
            var sent = 0
            while sent < bytes.count {
                let n = send(socket, bytes.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
                guard n > 0 else { throw ConfigError("the connection closed while sending") }
                sent += n
            }
        }
        let head = try readUntilBlankLine()
        let lines = head.split(separator: "\r\n")
        guard let statusLine = lines.first, let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") else {
            throw ConfigError("not an HTTP response")
        }
        let length = lines.dropFirst().compactMap { line -> Int? in
            let parts = line.split(separator: ":", maxSplits: 1)
            return parts.count == 2 && parts[0].lowercased() == "content-length" ? Int(parts[1].trimmingCharacters(in: .whitespaces)) : nil
        }.first ?? 0
        try skip(length)
        return status
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 16_384)
        let n = recv(socket, &chunk, chunk.count, 0)
        guard n > 0 else { throw ConfigError("the connection closed") }
        buffer += chunk[0..<n]
    }

    private func readUntilBlankLine() throws -> String {
        while true {
            if let end = buffer.indices.dropLast(3).first(where: {
                buffer[$0] == 13 && buffer[$0 + 1] == 10 && buffer[$0 + 2] == 13 && buffer[$0 + 3] == 10
            }) {
                let head = String(decoding: buffer[0..<end], as: UTF8.self)
                buffer.removeFirst(end + 4)
                return head
            }
            try fill()
        }
    }

    private func skip(_ count: Int) throws {
        while buffer.count < count { try fill() }
        buffer.removeFirst(count)
    }
}
