import Bus
import Foundation
import HubProtocol

/// Sends requests to another service without waiting: each reply is matched to its request by
/// correlation id and handed to the callback given with it, so a service can have many requests
/// in flight to a slower one while its own loop goes on. A request without a reply in time gets
/// a `timeout` failure.
public final class HubForwarder {
    public let socket: ZMQSocket
    public let endpoint: String
    private let auth: () -> String?
    private let timeout: TimeInterval
    private var pending: [String: Pending] = [:]

    private struct Pending {
        let deadline: Date
        let complete: (Data?) -> Void
    }

    public init(
        context: ZMQContext = .shared, connect endpoint: String, timeoutMs: Int,
        curve: (keys: CurveKeyPair, serverPublicKey: String)? = nil, auth: @escaping () -> String?
    ) throws {
        socket = try context.socket(.dealer)
        try socket.setLinger(0)
        if let curve { try socket.makeCurveClient(curve.keys, serverPublicKey: curve.serverPublicKey) }
        try socket.setReconnectInterval(100, max: 2_000)
        try socket.setSendHighWaterMark(100_000)
        try socket.connect(endpoint)
        self.endpoint = endpoint
        self.auth = auth
        timeout = TimeInterval(timeoutMs) / 1000
    }

    public var inFlight: Int { pending.count }

    /// Sends `request`; `completion` runs later on this loop with the reply or the failure.
    public func forward<R: HubRequest>(_ request: R, completion: @escaping (Result<R.Reply, HubError>) -> Void) {
        forward(request, hub: nil, completion: completion)
    }

    /// `hub` names the request's hub in its envelope (nil: the default hub).
    public func forward<R: HubRequest>(_ request: R, hub: String?, completion: @escaping (Result<R.Reply, HubError>) -> Void) {
        let id = HubClient.nextCorrelationID()
        pending[id] = Pending(deadline: Date().addingTimeInterval(timeout)) { data in
            guard let data else {
                completion(.failure(HubError(.timeout, "\(R.messageType): no reply from \(self.endpoint)")))
                return
            }
            do throws(HubError) {
                completion(.success(try HubCodec.decodeReply(R.Reply.self, from: data).payload))
            } catch {
                completion(.failure(error))
            }
        }
        do {
            guard try socket.send([Data(), HubCodec.encode(request, id: id, auth: auth(), hub: hub)], wait: false) else {
                pending.removeValue(forKey: id)?.complete(nil)
                return
            }
        } catch {
            pending.removeValue(forKey: id)?.complete(nil)
        }
    }

    /// Hands waiting replies to their requests. Call when the socket is readable.
    public func receive() throws {
        while let frames = try socket.receive(wait: false) {
            // The correlation id is found without parsing the whole reply; decoding it is the caller's.
            guard let body = frames.last, let id = HubCodec.replyID(body),
                let waiting = pending.removeValue(forKey: id)
            else { continue }
            waiting.complete(body)
        }
    }

    /// Fails requests whose time is up. Call from a timer.
    public func expire(now: Date = Date()) {
        for (id, waiting) in pending where waiting.deadline <= now {
            pending.removeValue(forKey: id)
            waiting.complete(nil)
        }
    }

    public func close() { socket.close() }
}
