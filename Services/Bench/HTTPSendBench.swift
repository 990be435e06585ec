import Auth
import Foundation
import HubProtocol
import ServiceKit
import Storage
import Synchronization
import Bus
import NHPublish

#if canImport(Glibc)
import Glibc
#endif

/// Template sends accepted through the REST gateway beside the same sends over the bus, in one
/// run against the same services: C clients at once each way, every send durable before its reply.
/// Then the same sends over the bus with many in flight on each client, beside their reference:
/// rows as the publish service stores them, inserted straight into a SQLite file on the same disk.
enum HTTPSendBench {
    /// Requests each pipelined client keeps in flight.
    static let window = 32
    /// Clients of the pipelined figures.
    static let pipelinedClients = 8
    /// Rows per transaction in the SQLite reference.
    static let batch = 100
    static let insertsName = "SQLite inserts, \(batch) per commit"

    static func run(sends: Int, clients: Int = pipelinedClients) throws -> [BenchResult] {
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
        // The dispatcher takes what is accepted from the publish service's stream once it has read
        // the registry; until then it pulls, page by page, which would load the publish service
        // during the first timed round. Timing starts once it has planned the first send.
        let dispatcher = cluster.environment["NH_DISPATCH_REQUESTS"]!
        guard FanoutBench.waitFor(timeout: 30, { (try? FanoutBench.details(cluster, dispatcher)["cursor"]).flatMap { UInt64($0) } ?? 0 >= 1 })
        else { throw ConfigError("the dispatcher did not plan the first send within 30 s") }
        let publish = cluster.environment["NH_PUBLISH_REQUESTS"]!
        let busSecurity = cluster.bus

        // Each client waits for its answer before sending again.
        func overBus(_ count: Int, clients: Int, round: Int) -> (count: Int, seconds: Double) {
            measure(sends: count, clients: clients) { _ in
                // Signed once, as the HTTP clients' token is, so that neither way pays for signing per send.
                let client = try HubCluster.client(publish, credential: credential, bus: busSecurity)
                let busToken = credential.token(for: "http://127.0.0.1:7780/hub")
                client.auth = { busToken }
                return { index in
                    (try? client.call(SendNotification(
                        format: .template, properties: ["messageParam": "bus \(round) \(index)"], tagExpression: "HttpBench"))) != nil
                }
            }
        }
        func overHTTP(_ count: Int, clients: Int) -> (count: Int, seconds: Double) {
            measure(sends: count, clients: clients) { _ in
                let connection = try HTTPConnection(port: port)
                return { index in (try? connection.status(of: request(port: port, token: token, index: index))) == 201 }
            }
        }

        // Alternately, so that neither way runs on a warmer machine than the other.
        var bus = (count: 0, seconds: 0.0), http = (count: 0, seconds: 0.0), piped = (count: 0, seconds: 0.0), rows = (count: 0, seconds: 0.0)
        for round in 0..<2 {
            let pipedRound = measureThreads(clients: clients) { thread in
                try pipelined(publish, credential: credential, bus: busSecurity, round: round, sends: sends / 2, clients: clients, thread: thread)
            }
            let rowsRound = try inserts(sends / 2, perCommit: batch, folder: cluster.dataDirectory, round: round)
            let busRound = overBus(sends / 2, clients: clients, round: round)
            let httpRound = overHTTP(sends / 2, clients: clients)
            piped = (piped.count + pipedRound.count, piped.seconds + pipedRound.seconds)
            rows = (rows.count + rowsRound.count, rows.seconds + rowsRound.seconds)
            bus = (bus.count + busRound.count, bus.seconds + busRound.seconds)
            http = (http.count + httpRound.count, http.seconds + httpRound.seconds)
        }
        // One client each way: nothing waits behind another send, so the difference is the time the
        // gateway's hop adds to one send.
        // In two halves each, alternately, as the rounds above; timed per send tried.
        let half = max(sends / 16, 1)
        var alone = (bus: (count: 0, seconds: 0.0), http: (count: 0, seconds: 0.0))
        for round in 2..<4 {
            let bus = overBus(half, clients: 1, round: round), http = overHTTP(half, clients: 1)
            alone = ((alone.bus.count + bus.count, alone.bus.seconds + bus.seconds), (alone.http.count + http.count, alone.http.seconds + http.seconds))
        }
        let hopMs = (alone.http.seconds - alone.bus.seconds) / Double(2 * half) * 1_000
        // How the dispatcher took the accepted notifications: from the publish service's stream, or pulled.
        let dispatch = (try? FanoutBench.details(cluster, dispatcher)) ?? [:]
        let taken = "dispatcher planned \(dispatch["streamedTotal"] ?? "?") from the stream, \(dispatch["pulledTotal"] ?? "?") pulled"
        return [
            BenchResult(
                name: "template sends accepted over the bus", unit: "send/s", count: bus.count, seconds: bus.seconds,
                note: "\(bus.count) sends, \(clients) clients, durable"),
            BenchResult(
                name: "template sends accepted over HTTP", unit: "send/s", count: http.count, seconds: http.seconds,
                baseline: "template sends accepted over the bus",
                note: "\(http.count) sends, \(clients) keep-alive connections to nh-gateway, durable; goal 0.9×"),
            BenchResult(
                name: "template sends accepted over the bus, one client", unit: "send/s", count: alone.bus.count, seconds: alone.bus.seconds,
                note: "\(alone.bus.count) of \(2 * half) sends, one at a time, durable"),
            BenchResult(
                name: "template sends accepted over HTTP, one client", unit: "send/s", count: alone.http.count, seconds: alone.http.seconds,
                baseline: "template sends accepted over the bus, one client",
                note: "\(alone.http.count) of \(2 * half) sends, one at a time; the gateway's hop adds \(String(format: "%.2f", hopMs)) ms to each"),
            BenchResult(
                name: "template sends accepted over the bus, pipelined", unit: "send/s", count: piped.count, seconds: piped.seconds,
                baseline: insertsName,
                note: "\(piped.count) sends, \(clients) clients with \(window) each in flight, durable; goal 0.5×; \(taken)"),
            BenchResult(
                name: insertsName, unit: "row/s", count: rows.count, seconds: rows.seconds,
                note: "rows as publish.db holds them (the same send bodies), one connection, WAL, synchronous=FULL, same disk"),
        ]
    }

    /// A thread's share of `sends` (every `clients`th from `thread`) over one connection that keeps
    /// up to `window` in flight (a DEALER whose replies are matched to their requests by correlation
    /// id: `HubForwarder`); returns how many were accepted.
    static func pipelined(
        _ endpoint: String, credential: ConnectionString, bus: BusSecurity?, round: Int, sends: Int, clients: Int, thread: Int
    ) throws -> () -> Int {
        let token = credential.token(for: "http://127.0.0.1:7780/hub")
        let forwarder = try HubForwarder(connect: endpoint, timeoutMs: 30_000, curve: bus?.client, auth: { token })
        return {
            var poller = Poller()
            _ = poller.add(forwarder.socket)
            var accepted = 0
            var next = thread
            while next < sends || forwarder.inFlight > 0 {
                while next < sends && forwarder.inFlight < window {
                    forwarder.forward(SendNotification(
                        format: .template, properties: ["messageParam": "piped \(round) \(next)"], tagExpression: "HttpBench")
                    ) { if case .success = $0 { accepted += 1 } }
                    next += clients
                }
                _ = try? poller.poll(timeout: 100)
                try? forwarder.receive()
                forwarder.expire()
            }
            forwarder.close()
            return accepted
        }
    }

    /// `count` rows as the publish service stores them (its schema, the same send bodies) inserted
    /// into a new SQLite file in `folder`, `perCommit` to a transaction, from one connection (SQLite
    /// has one writer at a time), WAL and synchronous=FULL as the service's store.
    static func inserts(_ count: Int, perCommit: Int, folder: URL, round: Int) throws -> (count: Int, seconds: Double) {
        let database = try SQLiteDatabase(path: folder.appendingPathComponent("inserts-\(round).db").path)
        defer { database.close() }
        try database.migrate(PublishSchema.migrations)
        let encoder = HubCodec.makeEncoder()
        let timeToLive = TimeInterval(HubConfig().defaultTimeToLive)
        let start = ContinuousClock.now
        for first in stride(from: 0, to: count, by: perCommit) {
            try database.transaction {
                for index in first..<min(count, first + perCommit) {
                    let now = Date()
                    _ = try database.run(
                        "INSERT INTO notifications (notification_id, idempotency_key, send, state, enqueued_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                        [RandomID.timeOrdered(at: now), String?.none, try encoder.encode(BreakingNewsBench.send(index)),
                         NotificationState.enqueued.rawValue, now.timeIntervalSince1970, now.addingTimeInterval(timeToLive).timeIntervalSince1970])
                }
            }
        }
        return (count, seconds(since: start))
    }

    /// Runs `sends` calls over `clients` threads, each with the sender `make` gives it.
    static func measure(sends: Int, clients: Int, make: @escaping @Sendable (Int) throws -> (Int) -> Bool) -> (count: Int, seconds: Double) {
        measureThreads(clients: clients) { thread in
            let send = try make(thread)
            return { stride(from: thread, to: sends, by: clients).reduce(0) { $0 + (send($1) ? 1 : 0) } }
        }
    }

    /// Runs `clients` threads at once, each the work `make` gives it, made before the clock starts;
    /// the sum of what they count, and the seconds until the last is done.
    static func measureThreads(clients: Int, make: @escaping @Sendable (Int) throws -> () -> Int) -> (count: Int, seconds: Double) {
        let counted = Mutex(0)
        let ready = DispatchGroup()
        let done = DispatchGroup()
        let go = DispatchSemaphore(value: 0)
        for thread in 0..<clients {
            ready.enter()
            done.enter()
            Thread {
                defer { done.leave() }
                let work = try? make(thread)
                ready.leave()
                go.wait()
                guard let work else { return }
                let mine = work()
                counted.withLock { $0 += mine }
            }.start()
        }
        ready.wait()
        let start = ContinuousClock.now
        for _ in 0..<clients { go.signal() }
        done.wait()
        return (counted.withLock { $0 }, seconds(since: start))
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
