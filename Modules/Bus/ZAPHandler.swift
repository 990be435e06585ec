import CLibZMQ
import Foundation
import Synchronization

/// Answers libzmq's authentication requests (ZAP, RFC 27) for every CURVE server socket of a
/// context, on a thread of its own. A connection is authenticated once, at its handshake: the
/// handler gets the peer's public key, which CURVE has proven the peer holds, and hands it back as
/// the connection's user id. Every message from that connection then carries the key as its
/// `User-Id` property (`ZMQSocket.receiveFromPeer`), so no message needs a credential of its own.
public final class ZAPHandler: @unchecked Sendable {
    public static let endpoint = "inproc://zeromq.zap.01"
    /// The ZAP domain of the sockets between services and their clients.
    public static let busDomain = "bus"
    /// The ZAP domain of the dispatcher's agent socket.
    public static let agentDomain = "agents"

    /// Decides whether a peer with this public key (Z85) may connect to a socket of this ZAP domain.
    public typealias Policy = @Sendable (_ domain: String, _ publicKey: String) -> Bool

    private let socket: ZMQSocket
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let counters = Mutex((accepted: 0, refused: 0))

    /// Binds the handler in `context`. It must exist before the CURVE sockets it serves take connections.
    public init(context: ZMQContext = .shared, policy: @escaping Policy = { _, _ in true }) throws(ZMQError) {
        socket = try context.socket(.rep)
        try socket.setLinger(0)
        try socket.setReceiveTimeout(200)
        try socket.bind(Self.endpoint)
        let thread = Thread { [self] in
            serve(policy)
            finished.signal()
        }
        thread.name = "zap"
        thread.start()
    }

    /// Handshakes accepted and refused so far.
    public var counts: (accepted: Int, refused: Int) { counters.withLock { ($0.accepted, $0.refused) } }

    /// Stops the thread and closes the socket.
    public func close() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        finished.wait()
    }

    private func serve(_ policy: Policy) {
        defer { socket.close() }
        while !stopping.load(ordering: .acquiring) {
            let request: [Data]
            do {
                guard let frames = try socket.receive() else { continue }
                request = frames
            } catch {
                return
            }
            // version, request id, domain, address, routing id, mechanism, credentials…
            guard request.count >= 6 else {
                // An answer libzmq will not take leaves that handshake to time out, which the peer retries.
                _ = try? socket.send([Data("1.0".utf8), request.count > 1 ? request[1] : Data(), Data("500".utf8),
                                      Data("malformed ZAP request".utf8), Data(), Data()])
                continue
            }
            let mechanism = String(decoding: request[5], as: UTF8.self)
            var status = "400", text = "refused", userId = ""
            if mechanism == "CURVE", request.count >= 7, request[6].count == 32, let key = Self.z85(request[6]) {
                if policy(String(decoding: request[2], as: UTF8.self), key) {
                    status = "200"
                    text = "OK"
                    userId = key
                }
            } else if mechanism != "CURVE" {
                // Only CURVE sockets consult this handler; anything else is let through unnamed.
                status = "200"
                text = "OK"
            }
            counters.withLock { status == "200" ? ($0.accepted += 1) : ($0.refused += 1) }
            // Likewise: the peer's handshake times out and is tried again.
            _ = try? socket.send([Data("1.0".utf8), request[1], Data(status.utf8), Data(text.utf8), Data(userId.utf8), Data()])
        }
    }

    /// A 32-byte key in Z85 text.
    public static func z85(_ key: Data) -> String? {
        var text = [CChar](repeating: 0, count: 41)
        let ok = key.withUnsafeBytes { bytes in
            zmq_z85_encode(&text, bytes.bindMemory(to: UInt8.self).baseAddress, key.count) != nil
        }
        return ok ? String(decoding: text.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
    }
}
