import Bus
import Foundation
import HubProtocol
import ServiceKit
import Synchronization

/// The same traffic through the hub's own layers: Bus sockets, the sequenced stream, the
/// request/reply patterns and the full HubProtocol envelope path.
enum BusBench {
    static func pushPull(_ settings: BenchSettings) throws -> BenchResult {
        let pull = try ZMQContext.shared.socket(.pull)
        try pull.setReceiveHighWaterMark(100_000)
        try pull.bind("tcp://127.0.0.1:*")
        let endpoint = pull.lastEndpoint
        let count = settings.messages
        let payload = Data(repeating: 0x61, count: settings.size)
        let sender = spawn {
            guard let push = try? ZMQContext.shared.socket(.push) else { return }
            try? push.setSendHighWaterMark(100_000)
            try? push.connect(endpoint)
            for _ in 0..<count { _ = try? push.send(payload) }
            try? push.setLinger(-1)
            push.close()
        }
        _ = try pull.receive()
        let start = ContinuousClock.now
        for _ in 1..<count { _ = try pull.receive() }
        let elapsed = seconds(since: start)
        sender.wait()
        pull.close()
        return BenchResult(
            name: "Bus PUSH/PULL", unit: "msg/s", count: count - 1, seconds: elapsed, baseline: RawZMQBench.pushPullName)
    }

    /// The owner's change stream: every message numbered on send and checked in order on receipt.
    static func sequencedPubSub(_ settings: BenchSettings) throws -> BenchResult {
        // No high-water mark, so the figure counts every message rather than the ones that fit.
        let publisher = try SequencedPublisher(bind: ["tcp://127.0.0.1:*"], sendHighWaterMark: 0)
        let endpoint = publisher.endpoints[0]
        let count = settings.messages
        let state = ReaderState()
        let reader = spawn {
            guard let subscriber = try? ZMQContext.shared.socket(.sub) else { return }
            try? subscriber.setReceiveHighWaterMark(0)
            try? subscriber.subscribe()
            try? subscriber.setReceiveTimeout(3_000)
            try? subscriber.connect(endpoint)
            var tracker = SequenceTracker()
            var applied = 0
            var start = ContinuousClock.now
            while applied < count, let frames = try? subscriber.receive(), let message = try? SequencedMessage(frames: frames) {
                if message.isHeartbeat {
                    if tracker.position == nil { tracker.reset(to: message.sequence) }
                    state.live.store(true, ordering: .relaxed)
                    continue
                }
                switch tracker.observe(message.sequence) {
                case .apply:
                    if applied == 0 { start = .now }
                    applied += 1
                case .skip: continue
                case .resync:
                    state.gaps.add(1, ordering: .relaxed)
                    tracker.reset(to: message.sequence)
                    applied += 1
                }
            }
            state.elapsedNanoseconds.store(Int(seconds(since: start) * 1e9), ordering: .relaxed)
            state.applied.store(applied, ordering: .relaxed)
            subscriber.close()
        }
        for _ in 0..<500 where !state.live.load(ordering: .relaxed) {
            try publisher.heartbeat()
            Thread.sleep(forTimeInterval: 0.01)
        }
        let payload = Data(repeating: 0x61, count: settings.size)
        for _ in 0..<count { try publisher.publish(topic: "bench", body: payload) }
        reader.wait()
        publisher.close()
        let applied = state.applied.load(ordering: .relaxed)
        let gaps = state.gaps.load(ordering: .relaxed)
        return BenchResult(
            name: "Bus sequenced PUB/SUB (gap-checked)", unit: "msg/s", count: max(0, applied - 1),
            seconds: Double(state.elapsedNanoseconds.load(ordering: .relaxed)) / 1e9,
            baseline: RawZMQBench.pushPullName,
            note: applied == count && gaps == 0 ? "all \(count) in order" : "\(applied)/\(count) received, \(gaps) gaps")
    }

    static func requestReply(_ settings: BenchSettings) throws -> BenchResult {
        let running = Running()
        let ready = DispatchSemaphore(value: 0)
        let endpointBox = Mutex("")
        let server = spawn {
            guard let server = try? RequestServer(bind: ["tcp://127.0.0.1:*"]) else { return }
            endpointBox.withLock { $0 = server.endpoints[0] }
            ready.signal()
            var poller = Poller()
            poller.add(server.socket)
            while running.flag.load(ordering: .relaxed) {
                _ = try? poller.poll(timeout: 50)
                _ = try? server.serve { $0.body }
            }
            server.close()
        }
        ready.wait()
        let client = try RequestClient(connect: endpointBox.withLock { $0 }, policy: RetryPolicy(timeout: 5_000, attempts: 1))
        let payload = [Data(repeating: 0x61, count: settings.size)]
        _ = try client.request(payload)
        let start = ContinuousClock.now
        for _ in 1..<settings.roundTrips { _ = try client.request(payload) }
        let elapsed = seconds(since: start)
        client.close()
        running.flag.store(false, ordering: .relaxed)
        server.wait()
        return BenchResult(
            name: "Bus RequestClient/RequestServer", unit: "rt/s", count: settings.roundTrips - 1, seconds: elapsed,
            baseline: RawZMQBench.requestReplyName)
    }

    static func hubProtocolRequests(_ settings: BenchSettings) throws -> BenchResult {
        let running = Running()
        let ready = DispatchSemaphore(value: 0)
        let endpointBox = Mutex("")
        let server = spawn {
            let logger = Logger(service: "nh-bench", level: .error)
            guard let server = try? HubServer(bind: "tcp://127.0.0.1:*", logger: logger, maxMessageBytes: 1 << 20) else {
                return
            }
            server.on(HealthRequest.self) { _ in
                HealthReply(service: "nh-bench", status: "ok", version: "", pid: 0, uptimeSeconds: 0, endpoints: [:])
            }
            endpointBox.withLock { $0 = server.endpoint }
            ready.signal()
            var poller = Poller()
            poller.add(server.socket)
            while running.flag.load(ordering: .relaxed) {
                _ = try? poller.poll(timeout: 50)
                _ = try? server.serve()
            }
            server.close()
        }
        ready.wait()
        let client = try HubClient(connect: endpointBox.withLock { $0 }, policy: RetryPolicy(timeout: 5_000, attempts: 1))
        _ = try client.call(HealthRequest())
        let start = ContinuousClock.now
        for _ in 1..<settings.roundTrips { _ = try client.call(HealthRequest()) }
        let elapsed = seconds(since: start)
        client.close()
        running.flag.store(false, ordering: .relaxed)
        server.wait()
        return BenchResult(
            name: "HubClient/HubServer health (JSON envelopes)", unit: "rt/s", count: settings.roundTrips - 1,
            seconds: elapsed, baseline: RawZMQBench.requestReplyName)
    }
}

final class ReaderState: Sendable {
    let live = Atomic<Bool>(false)
    let applied = Atomic<Int>(0)
    let gaps = Atomic<Int>(0)
    let elapsedNanoseconds = Atomic<Int>(0)
}

final class Running: Sendable {
    let flag = Atomic<Bool>(true)
}
