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
    /// Each message type's handler, in two steps (`Handler`).
    private var handlers: [MessageType: Handler] = [:]
    /// Requests answered with an error, by code; for metrics and tests.
    public private(set) var errorCounts: [ErrorCode: Int] = [:]
    public private(set) var requestCount = 0
    /// Deferred replies the socket would not take: their clients saw only a timeout.
    public private(set) var deferredRepliesLost = 0
    /// Requests answered, and the time spent on them, by message type.
    public private(set) var requestsByType: [MessageType: (count: Int, seconds: Double)] = [:]
    /// Requests answered without an error, by the hub they named (in lower case): a request for a
    /// hub the namespace does not have is refused, so only real hubs are counted.
    public private(set) var requestsByHub: [String: Int] = [:]
    /// The name requests that name no hub are counted under: the config's default hub.
    public var defaultHub = "hub"

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
        handlers[R.messageType] = Handler(
            decode: { data, parsed in try HubCodec.decode(R.self, from: data, parsed: parsed) },
            answer: { decoded, route, id in HubCodec.encode(try handler(decoded as! Envelope<R>, route), id: id) })
    }

    /// Like `on`, with the payload as `HubCodec.encodeValue` writes it, when decoding made it (see
    /// `HubCodec.decodeChecked`), for a handler that stores the payload.
    public func on<R: HubRequest>(_: R.Type, payloadJSON handler: @escaping (Envelope<R>, _ payloadJSON: Data?) throws -> R.Reply) {
        handlers[R.messageType] = Handler(
            decode: { data, parsed in try HubCodec.decodeChecked(R.self, from: data, parsed: parsed) },
            answer: { decoded, _, id in
                let (envelope, payloadJSON) = decoded as! (envelope: Envelope<R>, payloadJSON: Data?)
                return HubCodec.encode(try handler(envelope, payloadJSON), id: id)
            })
    }

    /// Answers requests of type `R` later: the handler gets a `respond` to call once, from this
    /// loop, when the answer is known — as when it waits on another service.
    public func onDeferred<R: HubRequest>(
        _: R.Type, _ handler: @escaping (Envelope<R>, _ respond: @escaping (Result<R.Reply, HubError>) -> Void) throws -> Void
    ) {
        handlers[R.messageType] = Handler(
            decode: { data, parsed in try HubCodec.decode(R.self, from: data, parsed: parsed) },
            answer: { [unowned self] decoded, route, id in
                try handler(decoded as! Envelope<R>) { result in
                    let reply: Data
                    switch result {
                    case .success(let message): reply = HubCodec.encode(message, id: id)
                    case .failure(let error): reply = self.fail(error, id: id)
                    }
                    do {
                        try self.server.reply(to: route, [reply])
                    } catch {
                        self.deferredRepliesLost += 1
                        self.logger.error(
                            "a deferred reply could not be sent; the client sees a timeout", ("type", R.messageType.rawValue), ("id", id),
                            ("error", "\(error)"))
                    }
                }
                return nil
            })
    }

    /// Sends a message the peer did not ask for, on a route a handler was given.
    public func push<M: HubMessage>(_ message: M, to route: [Data], id: String) throws(ZMQError) {
        try server.reply(to: route, [HubCodec.encode(message, id: id)])
    }

    /// This server's counters as Prometheus samples.
    public var samples: [String: Double] {
        var samples: [String: Double] = [
            "nh_requests_received_total": Double(requestCount), "nh_deferred_replies_lost_total": Double(deferredRepliesLost),
        ]
        for (type, figures) in requestsByType {
            samples["nh_requests_total{type=\"\(type)\"}"] = Double(figures.count)
            samples["nh_request_duration_seconds_sum{type=\"\(type)\"}"] = figures.seconds
            samples["nh_request_duration_seconds_count{type=\"\(type)\"}"] = Double(figures.count)
        }
        for (code, count) in errorCounts { samples["nh_errors_total{code=\"\(code.rawValue)\"}"] = Double(count) }
        for (hub, count) in requestsByHub { samples["nh_hub_requests_total{hub=\"\(hub)\"}"] = Double(count) }
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
    ///
    /// The group's requests are read and decoded first, on more than one core when there are
    /// enough of them (`decodeAll`); then each is answered in the order it came, on this thread.
    @discardableResult
    public func serve(limit: Int = 256, group: CommitGroup) throws(ZMQError) -> Int {
        var requests: [RoutedRequest] = []
        while requests.count < limit, let frames = try server.socket.receive(wait: false) {
            let request = RoutedRequest(frames: frames)
            if !request.route.isEmpty { requests.append(request) }
        }
        guard !requests.isEmpty else { return 0 }
        let decoded = decodeAll(requests.map(\.body))
        var replies: [[Data]] = []
        fullStore = nil
        let committed = group.run {
            for (request, decoded) in zip(requests, decoded) { replies.append(answer(decoded, route: request.route)) }
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
        answer(decode(body), route: route)
    }

    /// A message type's handler in two steps. `decode` reads a request and checks it; it touches
    /// nothing else, so requests of one group may be decoded side by side on other threads.
    /// `answer` acts on what was decoded, on the loop, and returns the reply (nil when it will
    /// reply later), with the correlation id of the header the request was routed by.
    struct Handler: @unchecked Sendable {
        let decode: (Data, HubCodec.Parsed) throws -> Any
        let answer: (_ decoded: Any, _ route: [Data], _ id: String) throws -> Data?
    }

    /// One request as decoding left it: refused (with its correlation id, when known, and its type
    /// and the time spent on it, when a handler refused it), or decoded for its handler.
    enum Decoded: @unchecked Sendable {
        case refused(Error, id: String, type: MessageType? = nil, seconds: Double = 0)
        case decoded(Handler, Any, type: MessageType, id: String, hub: String?, seconds: Double)
    }

    /// The cores decoding may use, read once: Foundation reads the count from files on each ask.
    static let cores = ProcessInfo.processInfo.activeProcessorCount

    /// Requests at least this many in a group are decoded on more than one thread.
    static let parallelDecodeFrom = 8

    /// Decodes each request, split over the machine's cores when there are `parallelDecodeFrom`
    /// or more: the handlers' decoding is plain (`Handler`), and what each request gives is kept
    /// in its own slot, in order.
    func decodeAll(_ bodies: [[Data]]) -> [Decoded] {
        let cores = Self.cores
        guard bodies.count >= Self.parallelDecodeFrom, cores > 1 else { return bodies.map(decode) }
        let shares = min(cores, bodies.count / (Self.parallelDecodeFrom / 2))
        let slots = DecodeSlots(count: bodies.count)
        let server = UncheckedBox(self)
        let input = UncheckedBox(bodies)
        DispatchQueue.concurrentPerform(iterations: shares) { share in
            for index in stride(from: share, to: input.value.count, by: shares) {
                slots.store(server.value.decode(input.value[index]), at: index)
            }
        }
        return slots.values
    }

    /// Checks a request's frames and envelope and decodes it for its handler. It reads only what
    /// is fixed once the handlers are installed, so it may run on any thread.
    func decode(_ body: [Data]) -> Decoded {
        guard body.count == 1 else {
            return .refused(HubError(
                .malformedFrames,
                body.isEmpty
                    ? "the request has no body frame; send one frame holding a JSON envelope"
                    : "the request has \(body.count) body frames; send exactly one, holding a JSON envelope"), id: "")
        }
        let data = body[0]
        guard data.count <= maxMessageBytes else {
            return .refused(HubError(
                .payloadTooLarge, "the request is \(data.count) bytes; the limit is \(maxMessageBytes)" + (sizeHint.map { " (\($0))" } ?? "")),
                id: HubCodec.scanID(data) ?? "")
        }
        let started = ContinuousClock.now
        // The header by a scan of the bytes, as the hub's own clients write it, and the request
        // decoded for its handler from there. A fast path only: a request it cannot decode is
        // parsed in full below, and what is wrong answered from there.
        if let scanned = HubCodec.scanHeader(data), let handler = handlers[scanned.header.type],
            let value = try? handler.decode(data, scanned)
        {
            return .decoded(
                handler, value, type: scanned.header.type, id: scanned.header.id, hub: scanned.header.hub, seconds: Self.seconds(since: started))
        }
        // Anything else is parsed in full, and what is wrong with it answered from the parse, as
        // if no scan had been tried: a body that is not JSON, whatever its header looked like, is
        // refused as such, with the id a parser finds in it, if any.
        let parsed: HubCodec.Parsed
        do {
            parsed = try HubCodec.parse(data)
        } catch {
            return .refused(error, id: HubServer.bestEffortID(data))
        }
        let header = parsed.header
        guard let handler = handlers[header.type] else {
            return .refused(HubError(
                .unknownType,
                "this service does not answer '\(header.type)'; it answers \(knownTypes.map(\.rawValue).joined(separator: ", "))"),
                id: header.id)
        }
        do {
            let value = try handler.decode(data, parsed)
            return .decoded(handler, value, type: header.type, id: header.id, hub: header.hub, seconds: Self.seconds(since: started))
        } catch {
            return .refused(error, id: header.id, type: header.type, seconds: Self.seconds(since: started))
        }
    }

    /// The reply to a decoded request: its handler's, or the error that refused it.
    func answer(_ decoded: Decoded, route: [Data]) -> [Data] {
        requestCount += 1
        switch decoded {
        case .refused(let error, let id, let type, let seconds):
            if let type { count(type, seconds: seconds) }
            return [reply(to: error, id: id, type: type)]
        case .decoded(let handler, let value, let type, let id, let hub, let decodeSeconds):
            let started = ContinuousClock.now
            currentPeer = route.first
            defer {
                currentPeer = nil
                count(type, seconds: decodeSeconds + Self.seconds(since: started))
            }
            do {
                let reply = try handler.answer(value, route, id).map { [$0] } ?? []
                requestsByHub[hub?.lowercased() ?? defaultHub, default: 0] += 1
                return reply
            } catch {
                return [reply(to: error, id: id, type: type)]
            }
        }
    }

    /// One request of `type` answered, in `seconds` (decoding and handling).
    private func count(_ type: MessageType, seconds: Double) {
        let previous = requestsByType[type] ?? (0, 0)
        requestsByType[type] = (previous.count + 1, previous.seconds + seconds)
    }

    /// The error reply for what a request's decoding or handler threw.
    private func reply(to error: Error, id: String, type: MessageType?) -> Data {
        switch error {
        case let error as HubError where error.code == .internal:
            // The service's own fault, such as a stored row it cannot read: its operator must hear of it.
            logger.error("request failed", ("type", type?.rawValue ?? "request"), ("id", id), ("error", error.message))
            return fail(error, id: id)
        case let error as HubError:
            return fail(error, id: id)
        case let error as StorageError where error.isFull:
            fullStore = error
            return fail(HubError(.unavailable, CommitGroup.describe(error)), id: id)
        default:
            let type = type?.rawValue ?? "request"
            logger.error("request failed", ("type", type), ("error", "\(error)"))
            return fail(HubError(.internal, "the service failed to handle '\(type)': \(error)"), id: id)
        }
    }

    static func seconds(since start: ContinuousClock.Instant) -> Double {
        start.duration(to: .now).inSeconds
    }

    func fail(_ error: HubError, id: String) -> Data {
        errorCounts[error.code, default: 0] += 1
        logger.debug("request refused", ("code", error.code.rawValue), ("reason", error.message))
        return HubCodec.encodeError(error, id: id)
    }

    /// The correlation id of a request whose envelope did not check out, when one can be read.
    static func bestEffortID(_ data: Data) -> String {
        // Any envelope Foundation's parser reads, however deep its other members nest; absent when the
        // body is not JSON, and the error reply then has no id.
        let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        return object?["id"] as? String ?? ""
    }

    public func close() { server.close() }
}

/// Each request's slot for what decoding it gave, written once from whichever thread decoded it.
private final class DecodeSlots: @unchecked Sendable {
    private var slots: [HubServer.Decoded?]
    private let lock = NSLock()

    init(count: Int) { slots = Array(repeating: nil, count: count) }

    func store(_ decoded: HubServer.Decoded, at index: Int) {
        lock.withLock { slots[index] = decoded }
    }

    var values: [HubServer.Decoded] { lock.withLock { slots.map { $0! } } }
}

/// A value handed to `concurrentPerform`'s threads, which only read it.
private struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
