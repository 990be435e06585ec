import CMosquitto
import Foundation
import ServiceKit

#if canImport(Glibc)
import Glibc
#endif

/// `nh-bench mqtt-subscribers`: one process's share of a fan-out's MQTT subscribers. It connects
/// `count` libmosquitto clients, subscribes each to the topic, says `{"event":"ready"}` on stdout
/// once every SUBACK is in, then counts deliveries until each client has `expect` distinct ones
/// (or stdin closes, or SIGTERM), and says `{"event":"done",...}` with the counts. With `--latency`
/// it also reports send-to-receive nanoseconds for its client 0 ("latencies") and, per message, for
/// whichever of its clients got it last ("slowest"), so that the time to reach every client can be
/// put together across processes. It keeps its
/// connections open after that until stdin closes, so that its leaving does not load the broker
/// while other processes are still receiving.
final class MQTTSubscriberSwarm {
    struct Options {
        var port: Int
        var count: Int
        var qos: Int32
        var topic: String
        var expect: Int
        var latency: Bool
        /// Only the timed client (client 0 of the `--latency` process) takes the topic; the rest
        /// subscribe elsewhere and stay connected, as idle devices do.
        var solo: Bool = false
        var prefix: String
        var timeout: Double
    }

    static let usage = """
        nh-bench mqtt-subscribers --port P --count K --qos Q --topic T --expect M [--prefix ID] [--latency] [--timeout SECONDS]
        """

    /// Connects in flight at once: a burst larger than the broker's listen backlog would have
    /// SYNs dropped and connects stalled for a second each.
    static let connectWindow = 25

    private final class Subscriber {
        unowned let swarm: MQTTSubscriberSwarm
        let index: Int
        var handle: OpaquePointer?
        var attempts = 0

        init(swarm: MQTTSubscriberSwarm, index: Int) {
            self.swarm = swarm
            self.index = index
        }
    }

    private let options: Options
    private let loop = MQTTClientLoop()
    private var subscribers: [Subscriber] = []
    private var nextToConnect = 0
    private var retry: [Int] = []
    private var connecting = 0
    private var subscribed = 0
    private var received = 0
    private var duplicates = 0
    private var distinct = 0
    private var lost = 0
    /// One bit per (client, sequence): has this client had this message already.
    private var seen: [UInt64]
    private var latencies: [Int] = []
    /// Per sequence, the longest send-to-receive time among this process's clients; -1 until one arrives.
    private var slowest: [Int] = []
    private var saidReady = false
    private var saidDone = false
    private var failure: String?
    private var stopping = false

    init(options: Options) {
        self.options = options
        seen = [UInt64](repeating: 0, count: (options.count * options.expect + 63) / 64)
        if options.latency {
            latencies.reserveCapacity(options.expect)
            slowest = [Int](repeating: -1, count: options.expect)
        }
    }

    static func main(_ arguments: [String]) -> Int32 {
        do {
            let parsed = try Arguments(
                arguments, valued: ["port", "count", "qos", "topic", "expect", "prefix", "timeout"], flags: ["latency", "solo"])
            guard let port = parsed[option: "port"].flatMap(Int.init), let count = parsed[option: "count"].flatMap(Int.init),
                let qos = parsed[option: "qos"].flatMap(Int32.init), let expect = parsed[option: "expect"].flatMap(Int.init),
                let topic = parsed[option: "topic"], count > 0, expect > 0, (0...2).contains(qos)
            else {
                FileHandle.standardError.write(Data((usage + "\n").utf8))
                return 2
            }
            let options = Options(
                port: port, count: count, qos: qos, topic: topic, expect: expect, latency: parsed.has("latency"),
                solo: parsed.has("solo"), prefix: parsed[option: "prefix"] ?? "nh-bench-\(getpid())",
                timeout: parsed[option: "timeout"].flatMap(Double.init) ?? 300)
            return MQTTSubscriberSwarm(options: options).run()
        } catch {
            FileHandle.standardError.write(Data("nh-bench mqtt-subscribers: \(error)\n".utf8))
            return 2
        }
    }

    func run() -> Int32 {
        mosquitto_lib_init()
        defer { mosquitto_lib_cleanup() }
        let signals = SignalWatcher()
        loop.watch(signals.fileDescriptor) { [unowned self] in
            _ = signals.drain()
            stopping = true
        }
        _ = fcntl(STDIN_FILENO, F_SETFL, fcntl(STDIN_FILENO, F_GETFL) | O_NONBLOCK)
        loop.watch(STDIN_FILENO) { [unowned self] in
            var buffer = [UInt8](repeating: 0, count: 256)
            let count = read(STDIN_FILENO, &buffer, buffer.count)
            if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
                loop.unwatch(STDIN_FILENO)
                stopping = true
            }
        }
        loop.onLost = { [unowned self] _ in
            lost += 1
            if !saidReady { failure = "a connection broke before every client had subscribed" }
        }
        subscribers = (0..<options.count).map { Subscriber(swarm: self, index: $0) }
        let deadline = ContinuousClock.now + .seconds(options.timeout)
        while !stopping && failure == nil && ContinuousClock.now < deadline {
            startConnects()
            loop.poll(timeout: 100)
            if !saidReady && subscribed == options.count {
                saidReady = true
                say("{\"event\":\"ready\"}")
            }
            let target = options.solo ? (options.latency ? options.expect : 0) : options.count * options.expect
            if !saidDone && saidReady && distinct >= target { sayDone() }
        }
        if let failure { say("{\"event\":\"error\",\"message\":\"\(failure)\"}") }
        if !saidDone { sayDone() }
        for subscriber in subscribers {
            if let handle = subscriber.handle { mosquitto_destroy(handle) }
        }
        return failure == nil ? 0 : 1
    }

    private func startConnects() {
        while connecting < Self.connectWindow && failure == nil {
            let index: Int
            if !retry.isEmpty {
                index = retry.removeFirst()
            } else if nextToConnect < options.count {
                index = nextToConnect
                nextToConnect += 1
            } else {
                return
            }
            connect(subscribers[index])
        }
    }

    private func connect(_ subscriber: Subscriber) {
        subscriber.attempts += 1
        if subscriber.handle == nil {
            let id = "\(options.prefix)-\(subscriber.index)"
            guard let handle = mosquitto_new(id, true, Unmanaged.passUnretained(subscriber).toOpaque()) else {
                failure = "mosquitto_new failed"
                return
            }
            subscriber.handle = handle
            mosquitto_connect_callback_set(handle) { _, context, code in
                let subscriber = Unmanaged<Subscriber>.fromOpaque(context!).takeUnretainedValue()
                subscriber.swarm.connected(subscriber, code: code)
            }
            mosquitto_subscribe_callback_set(handle) { _, context, _, count, granted in
                let subscriber = Unmanaged<Subscriber>.fromOpaque(context!).takeUnretainedValue()
                subscriber.swarm.subscribed(granted: count > 0 ? granted?[0] : nil)
            }
            mosquitto_message_callback_set(handle) { _, context, message in
                guard let message else { return }
                let subscriber = Unmanaged<Subscriber>.fromOpaque(context!).takeUnretainedValue()
                subscriber.swarm.delivered(to: subscriber, message.pointee)
            }
        }
        let rc = mosquitto_connect(subscriber.handle, "127.0.0.1", Int32(options.port), 60)
        if rc == MOSQ_ERR_SUCCESS.rawValue {
            connecting += 1
            loop.add(subscriber.handle!)
        } else if subscriber.attempts < 5 {
            retry.append(subscriber.index)
            usleep(20_000)
        } else {
            failure = "cannot connect to 127.0.0.1:\(options.port): \(String(cString: mosquitto_strerror(rc)))"
        }
    }

    private func connected(_ subscriber: Subscriber, code: Int32) {
        connecting -= 1
        guard code == 0 else {
            failure = "broker refused the connection: \(String(cString: mosquitto_connack_string(code)))"
            return
        }
        let topic = options.solo && !(options.latency && subscriber.index == 0) ? options.topic + "/idle" : options.topic
        guard mosquitto_subscribe(subscriber.handle, nil, topic, options.qos) == MOSQ_ERR_SUCCESS.rawValue else {
            failure = "mosquitto_subscribe failed"
            return
        }
    }

    private func subscribed(granted: Int32?) {
        guard let granted, granted != 0x80 else {
            failure = "broker refused the subscription"
            return
        }
        subscribed += 1
    }

    private func delivered(to subscriber: Subscriber, _ message: mosquitto_message) {
        let arrived = FanoutPayload.now()
        received += 1
        guard let payload = message.payload,
            let (sent, sequence) = FanoutPayload.parse(UnsafeRawBufferPointer(start: payload, count: Int(message.payloadlen))),
            sequence < options.expect
        else { return }
        let bit = subscriber.index * options.expect + sequence
        let mask = UInt64(1) << UInt64(bit % 64)
        if seen[bit / 64] & mask != 0 {
            duplicates += 1
            return
        }
        seen[bit / 64] |= mask
        distinct += 1
        if options.latency {
            let latency = arrived - sent
            if subscriber.index == 0 { latencies.append(latency) }
            if latency > slowest[sequence] { slowest[sequence] = latency }
        }
    }

    private func sayDone() {
        saidDone = true
        let recorded = latencies.map(String.init).joined(separator: ",")
        let latest = slowest.map(String.init).joined(separator: ",")
        say(
            "{\"event\":\"done\",\"received\":\(received),\"distinct\":\(distinct),\"duplicates\":\(duplicates),"
                + "\"lost\":\(lost),\"latencies\":[\(recorded)],\"slowest\":[\(latest)]}")
    }

    private func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
}
