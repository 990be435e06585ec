import CLibZMQ
import Foundation
import Synchronization

/// The reference: libzmq called directly from Swift, with no layer of ours in between.
enum RawZMQBench {
    static let pushPullName = "raw libzmq PUSH/PULL"
    static let requestReplyName = "raw libzmq REQ/REP round trips"

    static func pushPull(_ settings: BenchSettings) throws -> BenchResult {
        let context = zmq_ctx_new()!
        defer { zmq_ctx_term(context) }
        let pull = zmq_socket(context, ZMQ_PULL)!
        var hwm: Int32 = 100_000
        zmq_setsockopt(pull, ZMQ_RCVHWM, &hwm, 4)
        zmq_bind(pull, "tcp://127.0.0.1:*")
        let endpoint = lastEndpoint(pull)
        let count = settings.messages
        let size = settings.size
        let contextAddress = UInt(bitPattern: context)
        let sender = spawn {
            let context = UnsafeMutableRawPointer(bitPattern: contextAddress)!
            let push = zmq_socket(context, ZMQ_PUSH)!
            var hwm: Int32 = 100_000
            zmq_setsockopt(push, ZMQ_SNDHWM, &hwm, 4)
            zmq_connect(push, endpoint)
            var buffer = [UInt8](repeating: 0x61, count: size)
            for _ in 0..<count { zmq_send(push, &buffer, size, 0) }
            var linger: Int32 = -1
            zmq_setsockopt(push, ZMQ_LINGER, &linger, 4)
            zmq_close(push)
        }
        var buffer = [UInt8](repeating: 0, count: size + 16)
        _ = zmq_recv(pull, &buffer, buffer.count, 0)
        let start = ContinuousClock.now
        for _ in 1..<count { _ = zmq_recv(pull, &buffer, buffer.count, 0) }
        let elapsed = seconds(since: start)
        sender.wait()
        zmq_close(pull)
        return BenchResult(name: pushPullName, unit: "msg/s", count: count - 1, seconds: elapsed, baseline: nil)
    }

    static func requestReply(_ settings: BenchSettings) throws -> BenchResult {
        let context = zmq_ctx_new()!
        defer { zmq_ctx_term(context) }
        let rep = zmq_socket(context, ZMQ_REP)!
        zmq_bind(rep, "tcp://127.0.0.1:*")
        let endpoint = lastEndpoint(rep)
        let count = settings.roundTrips
        let size = settings.size
        let contextAddress = UInt(bitPattern: context)
        let client = spawn {
            let context = UnsafeMutableRawPointer(bitPattern: contextAddress)!
            let req = zmq_socket(context, ZMQ_REQ)!
            zmq_connect(req, endpoint)
            var buffer = [UInt8](repeating: 0x61, count: size + 16)
            for _ in 0..<count {
                zmq_send(req, &buffer, size, 0)
                _ = zmq_recv(req, &buffer, buffer.count, 0)
            }
            zmq_close(req)
        }
        var buffer = [UInt8](repeating: 0, count: size + 16)
        var start = ContinuousClock.now
        for index in 0..<count {
            let received = Int(zmq_recv(rep, &buffer, buffer.count, 0))
            if index == 0 { start = .now }
            zmq_send(rep, &buffer, max(0, received), 0)
        }
        client.wait()
        let elapsed = seconds(since: start)
        zmq_close(rep)
        return BenchResult(name: requestReplyName, unit: "rt/s", count: count - 1, seconds: elapsed, baseline: nil)
    }

    static func lastEndpoint(_ socket: UnsafeMutableRawPointer) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        var size = buffer.count
        zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, &buffer, &size)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
