import CMosquitto
import Foundation

/// The one libmosquitto publisher of a fan-out run, driven by the same epoll loop as the
/// subscribers so that nothing in the measured path goes through the library's select() loop.
final class MQTTFanoutPublisher {
    struct Outcome {
        var start: ContinuousClock.Instant
        var published: Int
        var acknowledged: Int
        var connectionLost: Bool
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    private let loop = MQTTClientLoop()
    private let handle: OpaquePointer
    private let qos: Int32
    private var connected = false
    private var refusal: Int32?
    private var acknowledged = 0
    private var lost = false
    private var closed = false
    private let body = UnsafeMutableRawBufferPointer.allocate(byteCount: FanoutPayload.size, alignment: 8)

    /// Connects to the broker on loopback and waits for its CONNACK.
    /// - Parameter inflight: the library's own cap on unacknowledged QoS 1 publishes.
    init(port: Int, qos: Int32, inflight: Int, timeout: Duration) throws {
        guard let handle = mosquitto_new("nh-bench-publisher-\(getpid())", true, nil) else { throw Failure(description: "mosquitto_new failed") }
        self.handle = handle
        self.qos = qos
        mosquitto_user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
        _ = mosquitto_max_inflight_messages_set(handle, UInt32(min(max(inflight, 1), 65_535)))
        mosquitto_connect_callback_set(handle) { _, context, code in
            let publisher = Unmanaged<MQTTFanoutPublisher>.fromOpaque(context!).takeUnretainedValue()
            if code == 0 { publisher.connected = true } else { publisher.refusal = code }
        }
        mosquitto_publish_callback_set(handle) { _, context, _ in
            Unmanaged<MQTTFanoutPublisher>.fromOpaque(context!).takeUnretainedValue().acknowledged += 1
        }
        loop.onLost = { [unowned self] _ in lost = true }
        let rc = mosquitto_connect(handle, "127.0.0.1", Int32(port), 60)
        guard rc == MOSQ_ERR_SUCCESS.rawValue else {
            close()
            throw Failure(description: "publisher cannot connect: \(String(cString: mosquitto_strerror(rc)))")
        }
        loop.add(handle)
        let deadline = ContinuousClock.now + timeout
        while !connected && refusal == nil && !lost && ContinuousClock.now < deadline { loop.poll(timeout: 10) }
        guard connected else {
            close()
            throw Failure(description: "publisher got no CONNACK" + (refusal.map { ": \(String(cString: mosquitto_connack_string($0)))" } ?? ""))
        }
    }

    /// Publishes messages 0..<count to `topic`: at `rate` per second when given, each stamped as
    /// it goes out, or else as fast as the broker takes them with at most `window` unacknowledged.
    /// Then keeps the connection serviced until `finished()` says every delivery is in, or the deadline.
    func run(
        topic: String, count: Int, window: Int, rate: Int?, deadline: ContinuousClock.Instant, finished: () -> Bool
    ) -> Outcome {
        let interval = rate.map { Duration.seconds(1) / max($0, 1) }
        var start: ContinuousClock.Instant?
        var published = 0
        while !lost && ContinuousClock.now < deadline {
            let now = ContinuousClock.now
            while published < count {
                if let interval, let start, now < start + interval * published { break }
                if interval == nil && published - acknowledged >= window { break }
                FanoutPayload.fill(body, sequence: published)
                let rc = mosquitto_publish(handle, nil, topic, Int32(FanoutPayload.size), body.baseAddress, qos, false)
                guard rc == MOSQ_ERR_SUCCESS.rawValue else {
                    lost = true
                    break
                }
                if start == nil { start = now }
                published += 1
            }
            loop.refresh(handle)
            if published == count && finished() { break }
            var timeout: Int32 = 1
            if let interval, let start, published < count {
                let wait = (start + interval * published) - ContinuousClock.now
                timeout = Int32(max(1, (wait / .milliseconds(1)).rounded(.up)))
            }
            loop.poll(timeout: timeout)
        }
        return Outcome(start: start ?? .now, published: published, acknowledged: acknowledged, connectionLost: lost)
    }

    func close() {
        guard !closed else { return }
        closed = true
        if connected && !lost {
            _ = mosquitto_disconnect(handle)
            loop.refresh(handle)
            loop.poll(timeout: 10)
        }
        mosquitto_destroy(handle)
        body.deallocate()
    }
}
