import Bus
import Foundation
import HubProtocol

/// A service's request socket speaking `HubProtocol`: it checks frames and envelopes, routes each
/// request by type to its handler, and always answers — with the handler's reply or an error that
/// has a stable code. Bad input never stops the loop.
public final class HubServer {
    public let server: RequestServer
    public let logger: Logger
    public let maxMessageBytes: Int
    private var handlers: [MessageType: (Data, HubCodec.Parsed, [Data]) throws -> Data] = [:]
    /// Requests answered with an error, by code; for metrics and tests.
    public private(set) var errorCounts: [ErrorCode: Int] = [:]
    public private(set) var requestCount = 0

    public init(
        context: ZMQContext = .shared, bind endpoint: String, logger: Logger, maxMessageBytes: Int,
        curve: CurveKeyPair? = nil
    ) throws(ZMQError) {
        // The socket limit is a backstop well above the checked limit, so that an oversized request
        // still gets a readable error reply instead of a dropped connection.
        var options = RequestServer.Options(maxMessageSize: maxMessageBytes * 4 + 4096, curve: curve)
        options.sendHighWaterMark = 100_000
        options.receiveHighWaterMark = 100_000
        server = try RequestServer(context: context, bind: [endpoint], options: options)
        self.logger = logger
        self.maxMessageBytes = maxMessageBytes
    }

    public var endpoint: String { server.endpoints.first ?? "" }
    public var socket: ZMQSocket { server.socket }

    /// Answers requests of type `R` with `handler`. Throwing a `HubError` replies with its code.
    public func on<R: HubRequest>(_: R.Type, _ handler: @escaping (Envelope<R>) throws -> R.Reply) {
        on(R.self) { envelope, _ in try handler(envelope) }
    }

    /// Like `on`, with the route back to the peer, for servers that push to their peers later.
    public func on<R: HubRequest>(_: R.Type, _ handler: @escaping (Envelope<R>, _ route: [Data]) throws -> R.Reply) {
        handlers[R.messageType] = { data, parsed, route in
            let envelope = try HubCodec.decode(R.self, from: data, parsed: parsed)
            let reply = try handler(envelope, route)
            return HubCodec.encode(reply, id: parsed.header.id)
        }
    }

    /// Sends a message the peer did not ask for, on a route a handler was given.
    public func push<M: HubMessage>(_ message: M, to route: [Data], id: String) throws(ZMQError) {
        try server.reply(to: route, [HubCodec.encode(message, id: id)])
    }

    /// The message types this server answers.
    public var knownTypes: [MessageType] { handlers.keys.sorted { $0.rawValue < $1.rawValue } }

    /// Serves what is waiting on the socket.
    @discardableResult
    public func serve(limit: Int = 256) throws(ZMQError) -> Int {
        try server.serve(limit: limit) { request in self.handle(request.body, route: request.route) }
    }

    /// The reply to one request's body frames.
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
                .payloadTooLarge, "the request is \(data.count) bytes; the limit is \(maxMessageBytes)"), id: "")]
        }
        let parsed: HubCodec.Parsed
        do {
            parsed = try HubCodec.parse(data)
        } catch {
            return [fail(error, id: HubServer.bestEffortID(data))]
        }
        let header = parsed.header
        guard let handler = handlers[header.type] else {
            return [fail(HubError(
                .unknownType,
                "this service does not answer '\(header.type)'; it answers \(knownTypes.map(\.rawValue).joined(separator: ", "))"),
                id: header.id)]
        }
        do {
            return [try handler(data, parsed, route)]
        } catch let error as HubError {
            return [fail(error, id: header.id)]
        } catch {
            logger.error("request failed", ("type", header.type), ("error", "\(error)"))
            return [fail(HubError(.internal, "the service failed to handle '\(header.type)': \(error)"), id: header.id)]
        }
    }

    private func fail(_ error: HubError, id: String) -> Data {
        errorCounts[error.code, default: 0] += 1
        logger.debug("request refused", ("code", error.code.rawValue), ("reason", error.message))
        return HubCodec.encodeError(error, id: id)
    }

    /// The correlation id of a request whose envelope did not check out, when one can be read.
    static func bestEffortID(_ data: Data) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return "" }
        return object["id"] as? String ?? ""
    }

    public func close() { server.close() }
}
