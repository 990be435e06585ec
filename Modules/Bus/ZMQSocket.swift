import CLibZMQ
import Foundation

/// One libzmq socket. Not thread-safe: use it from one thread at a time.
/// The socket closes on `close()` or when it is released.
public final class ZMQSocket {
    public let type: SocketType
    let context: ZMQContext
    private(set) var handle: UnsafeMutableRawPointer?

    init(context: ZMQContext, type: SocketType) throws(ZMQError) {
        guard let handle = zmq_socket(context.handle, type.rawValue) else {
            throw ZMQError(function: "zmq_socket", errno: zmq_errno())
        }
        self.context = context
        self.type = type
        self.handle = handle
    }

    deinit { close() }

    public var isClosed: Bool { handle == nil }

    /// Closes the socket. Pending outgoing messages are kept for the linger period.
    public func close() {
        guard let handle else { return }
        zmq_close(handle)
        self.handle = nil
    }

    private func live(_ function: String) throws(ZMQError) -> UnsafeMutableRawPointer {
        guard let handle else { throw ZMQError(function: function, errno: ENOTSOCK) }
        return handle
    }

    // MARK: Endpoints

    public func bind(_ endpoint: String) throws(ZMQError) {
        let handle = try live("zmq_bind")
        try zmqCheck("zmq_bind(\(endpoint))") { zmq_bind(handle, endpoint) }
    }

    public func connect(_ endpoint: String) throws(ZMQError) {
        let handle = try live("zmq_connect")
        try zmqCheck("zmq_connect(\(endpoint))") { zmq_connect(handle, endpoint) }
    }

    public func disconnect(_ endpoint: String) throws(ZMQError) {
        let handle = try live("zmq_disconnect")
        try zmqCheck("zmq_disconnect(\(endpoint))") { zmq_disconnect(handle, endpoint) }
    }

    public func unbind(_ endpoint: String) throws(ZMQError) {
        let handle = try live("zmq_unbind")
        try zmqCheck("zmq_unbind(\(endpoint))") { zmq_unbind(handle, endpoint) }
    }

    /// The endpoint last bound, with the real port when bound to `tcp://host:*`.
    public var lastEndpoint: String {
        // Empty before the first bind, or once closed.
        (try? stringOption(ZMQ_LAST_ENDPOINT, name: "ZMQ_LAST_ENDPOINT")) ?? ""
    }

    // MARK: Sending and receiving

    /// Sends all frames as one multipart message.
    /// Returns false, having sent nothing, when `wait` is false and the message would block.
    @discardableResult
    public func send(_ frames: [Data], wait: Bool = true) throws(ZMQError) -> Bool {
        let handle = try live("zmq_send")
        precondition(!frames.isEmpty, "a message has at least one frame")
        let last = frames.count - 1
        for (index, frame) in frames.enumerated() {
            var flags: Int32 = index < last ? ZMQ_SNDMORE : 0
            if !wait { flags |= ZMQ_DONTWAIT }
            let rc = try zmqCall("zmq_send") {
                frame.withUnsafeBytes { zmq_send(handle, $0.baseAddress, $0.count, flags) }
            }
            // libzmq queues multipart messages atomically, so only the first frame can block.
            if rc == nil { return false }
        }
        return true
    }

    /// Sends a two-frame message, as to a ROUTER's peer: its routing id, then one frame. The same
    /// as `send([first, second])`, without the array, for the dispatcher's message per delivery.
    public func send(_ first: Data, _ second: Data, wait: Bool = true) throws(ZMQError) -> Bool {
        let handle = try live("zmq_send")
        let flags: Int32 = wait ? 0 : ZMQ_DONTWAIT
        let rc = try zmqCall("zmq_send") { first.withUnsafeBytes { zmq_send(handle, $0.baseAddress, $0.count, flags | ZMQ_SNDMORE) } }
        // libzmq queues multipart messages atomically, so only the first frame can block; were the
        // second refused for now, it is sent waiting, so that no message is left half sent.
        guard rc != nil else { return false }
        if try zmqCall("zmq_send", { second.withUnsafeBytes { zmq_send(handle, $0.baseAddress, $0.count, flags) } }) == nil {
            _ = try zmqCall("zmq_send") { second.withUnsafeBytes { zmq_send(handle, $0.baseAddress, $0.count, 0) } }
        }
        return true
    }

    /// Sends one single-frame message.
    @discardableResult
    public func send(_ frame: Data, wait: Bool = true) throws(ZMQError) -> Bool {
        try send([frame], wait: wait)
    }

    /// Receives one whole multipart message.
    /// Returns nil when nothing arrives: immediately when `wait` is false, or after the receive timeout.
    public func receive(wait: Bool = true) throws(ZMQError) -> [Data]? {
        try receiveFromPeer(wait: wait)?.frames
    }

    /// Receives one whole multipart message with the `User-Id` of the connection it came on: on a
    /// CURVE socket served by a `ZAPHandler`, the peer's public key. Nil when nothing is waiting.
    public func receiveFromPeer(wait: Bool = true) throws(ZMQError) -> (frames: [Data], peer: String?)? {
        let handle = try live("zmq_msg_recv")
        var frames: [Data] = []
        var peer: String?
        var message = zmq_msg_t()
        zmq_msg_init(&message)
        defer { zmq_msg_close(&message) }
        while true {
            let flags: Int32 = (wait || !frames.isEmpty) ? 0 : ZMQ_DONTWAIT
            guard try zmqCall("zmq_msg_recv", { zmq_msg_recv(&message, handle, flags) }) != nil else {
                if frames.isEmpty { return nil }
                continue
            }
            // A ROUTER's routing-id frame is its own and carries no properties; the peer's frames do.
            if peer == nil, let property = zmq_msg_gets(&message, "User-Id") {
                let text = String(cString: property)
                peer = text.isEmpty ? nil : text
            }
            let size = zmq_msg_size(&message)
            frames.append(size == 0 ? Data() : Data(bytes: zmq_msg_data(&message), count: size))
            if zmq_msg_more(&message) == 0 { return (frames, peer) }
        }
    }

    // MARK: Options

    func setOption(_ option: Int32, name: String, _ value: Int32) throws(ZMQError) {
        let handle = try live("zmq_setsockopt")
        var value = value
        try zmqCheck("zmq_setsockopt(\(name))") {
            zmq_setsockopt(handle, option, &value, MemoryLayout<Int32>.size)
        }
    }

    func setOption(_ option: Int32, name: String, _ value: Int64) throws(ZMQError) {
        let handle = try live("zmq_setsockopt")
        var value = value
        try zmqCheck("zmq_setsockopt(\(name))") {
            zmq_setsockopt(handle, option, &value, MemoryLayout<Int64>.size)
        }
    }

    func setOption(_ option: Int32, name: String, _ bytes: [UInt8]) throws(ZMQError) {
        let handle = try live("zmq_setsockopt")
        try zmqCheck("zmq_setsockopt(\(name))") {
            bytes.withUnsafeBytes { zmq_setsockopt(handle, option, $0.baseAddress, $0.count) }
        }
    }

    func intOption(_ option: Int32, name: String) throws(ZMQError) -> Int32 {
        let handle = try live("zmq_getsockopt")
        var value: Int32 = 0
        var size = MemoryLayout<Int32>.size
        try zmqCheck("zmq_getsockopt(\(name))") { zmq_getsockopt(handle, option, &value, &size) }
        return value
    }

    func stringOption(_ option: Int32, name: String) throws(ZMQError) -> String {
        let handle = try live("zmq_getsockopt")
        var buffer = [UInt8](repeating: 0, count: 512)
        var size = buffer.count
        try zmqCheck("zmq_getsockopt(\(name))") { zmq_getsockopt(handle, option, &buffer, &size) }
        let end = buffer.firstIndex(of: 0) ?? size
        return String(decoding: buffer[..<end], as: UTF8.self)
    }
}
