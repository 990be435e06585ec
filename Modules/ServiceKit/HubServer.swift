import Bus
import Foundation
import HubProtocol
import Storage

/// A service's request socket speaking `HubProtocol`: it checks frames and envelopes, routes each
/// request by type to its handler, and always answers — with the handler's reply or an error that
/// has a stable code. Bad input never stops the loop.
public final class HubServer {
    public let server: RequestServer
    public let logger: Logger
    public let maxMessageBytes: Int
    /// Said after the size limit in a `payload_too_large` reply, such as which setting sets it.
    public var sizeHint: String?
    /// A full store met by a handler of the group being served: the reason the group then fails.
    private var fullStore: StorageError?
    /// The connection of the request being handled (its first routing frame), for per-client limits.
    public private(set) var currentPeer: Data?
    /// A handler returns the reply, or nil when it will reply later.
    private var handlers: [MessageType: (Data, HubCodec.Parsed, [Data]) throws -> Data?] = [:]
    /// Requests answered with an error, by code; for metrics and tests.
    public private(set) var errorCounts: [ErrorCode: Int] = [:]
    public private(set) var requestCount = 0
    /// Requests answered, and the time spent on them, by message type.
    public private(set) var requestsByType: [MessageType: (count: Int, seconds: Double)] = [:]

    /// - Parameters:
    ///   - curve: the key pair of a CURVE server, whose handshakes go through the process's ZAP handler; nil for a plain socket.
    ///   - ownerOnly: for an ipc:// endpoint, only processes of this user may connect, and its
    ///     socket file is 0600 (the agent's control socket).
    public init(
        context: ZMQContext = .shared, bind endpoint: String, logger: Logger, maxMessageBytes: Int, curve: CurveKeyPair? = nil,
        ownerOnly: Bool = false
    ) throws(ZMQError) {
        // The socket limit is a backstop well above the checked limit, so that an oversized request
        // still gets a readable error reply instead of a dropped connection.
        var options = RequestServer.Options(maxMessageSize: Self.socketLimit(maxMessageBytes: maxMessageBytes), curve: curve)
        options.sendHighWaterMark = 100_000
        options.receiveHighWaterMark = 100_000
        options.ownerOnly = ownerOnly
        server = try RequestServer(context: context, bind: [endpoint], options: options)
        self.logger = logger
        self.maxMessageBytes = maxMessageBytes
    }

    /// The most a request socket reads: a frame larger than this closes the connection at libzmq
    /// (ZMQ_MAXMSGSIZE) before any reply can be made, so the hub's clients do not send one.
    public static func socketLimit(maxMessageBytes: Int) -> Int { maxMessageBytes * 4 + 4096 }

    public var endpoint: String { server.endpoints.first ?? "" }
    public var socket: ZMQSocket { server.socket }

    /// Answers requests of type `R` with `handler`. Throwing a `HubError` replies with its code.
    public func on<R: HubRequest>(_: R.Type, _ handler: @escaping (Envelope<R>) throws -> R.Reply) {
        on(R.self) { (envelope: Envelope<R>, _: [Data]) in try handler(envelope) }
    }

    /// Like `on`, with the route back to the peer, for servers that push to their peers later.
    public func on<R: HubRequest>(_: R.Type, _ handler: @escaping (Envelope<R>, _ route: [Data]) throws -> R.Reply) {
        handlers[R.messageType] = { data, parsed, route in
            let envelope = try HubCodec.decode(R.self, from: data, parsed: parsed)
            let reply = try handler(envelope, route)
            return HubCodec.encode(reply, id: parsed.header.id)
        }
    }

    /// Like `on`, with the payload as `HubCodec.encodeValue` writes it, when decoding made it (see
    /// `HubCodec.decodeChecked`), for a handler that stores the payload.
    public func on<R: HubRequest>(_: R.Type, payloadJSON handler: @escaping (Envelope<R>, _ payloadJSON: Data?) throws -> R.Reply) {
        handlers[R.messageType] = { data, parsed, _ in
            let (envelope, payloadJSON) = try HubCodec.decodeChecked(R.self, from: data, parsed: parsed)
            return HubCodec.encode(try handler(envelope, payloadJSON), id: parsed.header.id)
        }
    }

    /// Answers requests of type `R` later: the handler gets a `respond` to call once, from this
    /// loop, when the answer is known — as when it waits on another service.
    public func onDeferred<R: HubRequest>(
        _: R.Type, _ handler: @escaping (Envelope<R>, _ respond: @escaping (Result<R.Reply, HubError>) -> Void) throws -> Void
    ) {
        handlers[R.messageType] = { [unowned self] data, parsed, route in
            let envelope = try HubCodec.decode(R.self, from: data, parsed: parsed)
            let id = parsed.header.id
            try handler(envelope) { result in
                let reply: Data
                switch result {
                case .success(let message): reply = HubCodec.encode(message, id: id)
                case .failure(let error): reply = self.fail(error, id: id)
                }
                try? self.server.reply(to: route, [reply])
            }
            return nil
        }
    }

    /// Sends a message the peer did not ask for, on a route a handler was given.
    public func push<M: HubMessage>(_ message: M, to route: [Data], id: String) throws(ZMQError) {
        try server.reply(to: route, [HubCodec.encode(message, id: id)])
    }

    /// This server's counters as Prometheus samples.
    public var samples: [String: Double] {
        var samples: [String: Double] = ["nh_requests_received_total": Double(requestCount)]
        for (type, figures) in requestsByType {
            samples["nh_requests_total{type=\"\(type)\"}"] = Double(figures.count)
            samples["nh_request_duration_seconds_sum{type=\"\(type)\"}"] = figures.seconds
            samples["nh_request_duration_seconds_count{type=\"\(type)\"}"] = Double(figures.count)
        }
        for (code, count) in errorCounts { samples["nh_errors_total{code=\"\(code.rawValue)\"}"] = Double(count) }
        return samples
    }

    /// The message types this server answers.
    public var knownTypes: [MessageType] { handlers.keys.sorted { $0.rawValue < $1.rawValue } }

    /// Serves what is waiting on the socket.
    @discardableResult
    public func serve(limit: Int = 256) throws(ZMQError) -> Int {
        try server.serve(limit: limit) { request in
            let reply = self.handle(request.body, route: request.route)
            return reply.isEmpty ? nil : reply
        }
    }

    /// Serves what is waiting as one commit group: every request handled in one transaction, then
    /// the commit, then the queued effects, then the replies. If the commit fails, every request of
    /// the group gets `unavailable` and none of them happened.
    @discardableResult
    public func serve(limit: Int = 256, group: CommitGroup) throws(ZMQError) -> Int {
        var requests: [RoutedRequest] = []
        while requests.count < limit, let frames = try server.socket.receive(wait: false) {
            let request = RoutedRequest(frames: frames)
            if !request.route.isEmpty { requests.append(request) }
        }
        guard !requests.isEmpty else { return 0 }
        var replies: [[Data]] = []
        fullStore = nil
        let committed = group.run {
            for request in requests { replies.append(handle(request.body, route: request.route)) }
        }
        let reason = fullStore.map(CommitGroup.describe) ?? group.failureMessage
        if !committed { logger.error("commit failed; the group's requests were refused", ("requests", requests.count), ("reason", reason)) }
        for (index, request) in requests.enumerated() {
            // The transaction may fail before any request was handled (BEGIN on a full disk), so a
            // request can have no reply yet; a deferred request (an empty reply) answers on its own.
            var reply = index < replies.count ? replies[index] : [Data()]
            if !committed && !reply.isEmpty {
                let id = request.body.count == 1 ? HubServer.bestEffortID(request.body[0]) : ""
                reply = [fail(HubError(.unavailable, reason), id: id)]
            }
            if !reply.isEmpty { try server.reply(to: request.route, reply) }
        }
        return requests.count
    }

    /// The reply to one request's body frames; empty when a deferred handler will reply later.
    public func handle(_ body: [Data], route: [Data] = []) -> [Data] {
        requestCount += 1
        guard body.count == 1 else {
            return [fail(HubError(
                .malformedFrames,
                body.isEmpty
                    ? "the request has no body frame; send one frame holding a JSON envelope"
                    : "the request has \(body.count) body frames; send exactly one, holding a JSON envelope"), id: "")]
        }
        let data = body[0]
        guard data.count <= maxMessageBytes else {
            return [fail(HubError(
                .payloadTooLarge, "the request is \(data.count) bytes; the limit is \(maxMessageBytes)" + (sizeHint.map { " (\($0))" } ?? "")),
                id: HubCodec.scanID(data) ?? "")]
        }
        // The header by a scan of the bytes, as the hub's own clients write it; else by a parse,
        // which answers what is wrong with it.
        let parsed: HubCodec.Parsed
        if let scanned = HubCodec.scanHeader(data) {
            parsed = scanned
        } else {
            do {
                parsed = try HubCodec.parse(data)
            } catch {
                return [fail(error, id: HubServer.bestEffortID(data))]
            }
        }
        let header = parsed.header
        guard let handler = handlers[header.type] else {
            return [fail(HubError(
                .unknownType,
                "this service does not answer '\(header.type)'; it answers \(knownTypes.map(\.rawValue).joined(separator: ", "))"),
                id: header.id)]
        }
        let started = ContinuousClock.now
        currentPeer = route.first
        defer {
            currentPeer = nil
            let elapsed = started.duration(to: .now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let previous = requestsByType[header.type] ?? (0, 0)
            requestsByType[header.type] = (previous.count + 1, previous.seconds + seconds)
        }
        do {
            return try handler(data, parsed, route).map { [$0] } ?? []
        } catch let error as HubError {
            return [fail(error, id: header.id)]
        } catch let error as StorageError where error.isFull {
            fullStore = error
            return [fail(HubError(.unavailable, CommitGroup.describe(error)), id: header.id)]
        } catch {
            logger.error("request failed", ("type", header.type), ("error", "\(error)"))
            return [fail(HubError(.internal, "the service failed to handle '\(header.type)': \(error)"), id: header.id)]
        }
    }

    func fail(_ error: HubError, id: String) -> Data {
        errorCounts[error.code, default: 0] += 1
        logger.debug("request refused", ("code", error.code.rawValue), ("reason", error.message))
        return HubCodec.encodeError(error, id: id)
    }

    /// The correlation id of a request whose envelope did not check out, when one can be read.
    static func bestEffortID(_ data: Data) -> String {
        // Any envelope Foundation's parser reads, however deep its other members nest.
        let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        return object?["id"] as? String ?? ""
    }

    public func close() { server.close() }
}
