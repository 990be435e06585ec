import Bus
import Foundation
import HubProtocol
import Synchronization

/// What calls a service: a `HubClient` over the bus, or a stand-in in tests that run a service's
/// handlers in process.
public protocol ServiceCalling: AnyObject {
    func call<R: HubRequest>(_ request: R, auth: String?) throws -> R.Reply
}

/// Calls a service over request/reply with `HubProtocol` envelopes: a fresh correlation id per call,
/// kept across retries so a late reply to an earlier attempt still counts.
public final class HubClient: ServiceCalling {
    public let client: RequestClient
    /// Makes the envelope's `auth` for every call that passes none of its own; called per call,
    /// so a provider can hand out fresh tokens as old ones expire.
    public var auth: () -> String?
    /// The hub every call names in its envelope (nil: the default hub); called per call.
    public var hub: () -> String? = { nil }
    /// The largest request a service of the hub checks (`HubConfig.publishRequestBytes`), when
    /// known: a request too large for any service's socket to read (more than
    /// `HubServer.socketLimit` of it) would close the connection unanswered, so it is refused here
    /// with `payload_too_large` instead of being sent. Anything smaller is sent, and a service
    /// answers it with its own limit.
    public var maxMessageBytes: Int?

    public init(
        context: ZMQContext = .shared, connect endpoint: String, policy: RetryPolicy = RetryPolicy(),
        curve: (keys: CurveKeyPair, serverPublicKey: String)? = nil,
        auth: @escaping () -> String? = { nil }
    ) throws(ZMQError) {
        client = try RequestClient(context: context, connect: endpoint, policy: policy, curve: curve)
        self.auth = auth
    }

    /// A client with the config's timeout and attempts unless `policy` says otherwise, refusing
    /// requests larger than any service reads (`HubConfig.publishRequestBytes`).
    public convenience init(
        connect endpoint: String, config: HubConfig, policy: RetryPolicy? = nil, curve: (keys: CurveKeyPair, serverPublicKey: String)?,
        auth: @escaping () -> String?
    ) throws(ZMQError) {
        try self.init(
            connect: endpoint, policy: policy ?? RetryPolicy(timeout: config.requestTimeoutMs, attempts: config.requestAttempts), curve: curve,
            auth: auth)
        maxMessageBytes = config.publishRequestBytes
    }

    public var endpoint: String { client.endpoint }

    /// Sends a request and returns its reply. A failure reply is thrown as a `HubError`; no reply at
    /// all is thrown as a `HubError` with code `timeout`.
    public func call<R: HubRequest>(_ request: R, auth: String? = nil) throws -> R.Reply {
        let id = HubClient.nextCorrelationID()
        let data = HubCodec.encode(request, id: id, auth: auth ?? self.auth(), hub: hub())
        if let maxMessageBytes, data.count > HubServer.socketLimit(maxMessageBytes: maxMessageBytes) {
            throw HubError(
                .payloadTooLarge,
                "\(R.messageType): a request of \(data.count) bytes is over what any service reads "
                    + "(\(HubServer.socketLimit(maxMessageBytes: maxMessageBytes)) bytes; see maxMessageBytes and maxRichBytes); nothing was sent")
        }
        let reply: [Data]
        do {
            reply = try client.request([data]) { frames in
                guard frames.count == 1 else { return false }
                return HubCodec.replyID(frames[0]) == id
            }
        } catch let error as BusError {
            throw HubError(.timeout, "\(R.messageType): \(error)")
        }
        return try HubCodec.decodeReply(R.Reply.self, from: reply[0]).payload
    }

    /// Sends raw frames and returns the raw reply, for tools that test the wire itself.
    public func callRaw(_ frames: [Data]) throws -> [Data] {
        try client.request(frames)
    }

    public func close() { client.close() }

    private static let counter = Atomic<UInt64>(0)
    private static let prefix = String(UInt64.random(in: 0..<UInt64.max), radix: 36)

    /// Unique per process and across processes: a random prefix and a counter.
    public static func nextCorrelationID() -> String {
        let number = counter.add(1, ordering: .relaxed).newValue
        return "\(prefix)-\(number)"
    }
}

/// Several processes of one service that answer the same reads from a shared store, such as the
/// dispatchers for outcomes: a call goes to the one that answered last, and on no answer (a
/// `timeout` or `unavailable` error) to the next in turn, so a process that is down costs one
/// request timeout, not one per call. Any other error is the answer. For one thread, as a client is.
public final class FirstAnswering: ServiceCalling {
    public let services: [any ServiceCalling]
    /// The one asked first: the last that answered.
    public private(set) var current = 0

    public init(_ services: [any ServiceCalling]) {
        precondition(!services.isEmpty, "FirstAnswering needs at least one service")
        self.services = services
    }

    public func call<R: HubRequest>(_ request: R, auth: String?) throws -> R.Reply {
        var unanswered: HubError?
        for offset in 0..<services.count {
            let index = (current + offset) % services.count
            do {
                let reply = try services[index].call(request, auth: auth)
                current = index
                return reply
            } catch let error as HubError where error.code == .timeout || error.code == .unavailable {
                unanswered = error
            }
        }
        throw unanswered!
    }
}
