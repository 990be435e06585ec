import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Synchronization
import CMosquitto

/// Many simulated agents in one process (`nh-bench fleet`), for fan-out figures and tests at scale.
/// Each is a real installation registered through the registry with the listen key, and a real
/// CURVE DEALER with a key pair of its own that says hello, acknowledges every delivery and counts
/// what it saw twice. Given several dispatchers (`dispatch.agents`, separated by commas), each agent
/// connects to the first and follows a redirect to its shard's owner, as the agent does. It reports
/// on standard output, one JSON line per event:
/// `registered`, then (after a `connect` line on standard input) `welcomed`, then `stats` whenever
/// its counts change (with `lastReceivedNs`, the CLOCK_MONOTONIC time of the latest delivery), and
/// `latencies` (milliseconds, for agent 0) when standard input closes.
enum AgentFleet {
    struct Options {
        var count = 1_000
        var prefix = "fleet"
        var tag = "fanout"
    }

    static func run(_ options: Options) throws {
        let environment = ProcessInfo.processInfo.environment
        let config = try ConfigLoader.load(file: nil, environment: environment)
        let dataDirectory = URL(fileURLWithPath: config.dataDir, isDirectory: true)
        let keys = try KeyStore.loadOrCreate(directory: dataDirectory)
        guard let listen = keys.key(named: AccessKey.defaultListenName), let serverKey = BusKeys.publicKey(directory: dataDirectory)
        else { throw ConfigError("no hub keys in \(config.dataDir): start the services first") }
        let credential = ConnectionString(endpoint: config.namespace, keyName: listen.name, key: listen.key)
        let bus = BusSecurity(
            serverKeys: nil, clientKeys: try BusSecurity.clientKeys(for: credential), serverPublicKey: serverKey, admitted: [])
        // Hellos and transport heartbeats as the agent has them, from the hub's settings.
        let helloInterval = Duration.milliseconds(config.agentHeartbeatMs)
        let dispatchers = HubConfig.dispatcherEndpoints(config.dispatch.agents)
        let transport = config.agentTransportHeartbeat(dispatchers: dispatchers.count)
        let ids = (0..<options.count).map { "\(options.prefix)-\($0)" }
        let pairs = try ids.map { _ in try CurveKeyPair.generate() }

        // Registration, many requests in flight, as a fleet of real devices would register.
        let registry = try HubForwarder(connect: config.registry.requests, timeoutMs: 30_000, curve: bus.client) { credential.token(for: config.hubResource) }
        try BulkRegistration.upsert(
            zip(ids, pairs).map { id, pair in
                Installation(
                    installationId: id, platform: "linux", pushChannel: pair.publicKey, tags: [options.tag],
                    templates: ["default": InstallationTemplate(body: #"{"m":"$(m)"}"#)])
            }, registry: registry)
        registry.close()
        emit(["event": "registered", "count": ids.count])

        // Wait for the word to connect, so that connecting can be timed on its own.
        guard let line = readLine(), line == "connect" else { return }
        let context = ZMQContext(ioThreads: 1, maxSockets: options.count + 64)
        var sockets: [ZMQSocket] = []
        let endpoint = dispatchers[0]
        var connectedTo = [String](repeating: endpoint, count: pairs.count)
        for pair in pairs {
            let socket = try context.socket(.dealer)
            try socket.setLinger(0)
            try socket.makeCurveClient(pair, serverPublicKey: serverKey)
            try socket.setReconnectInterval(100 + Int.random(in: 0..<400), max: 5_000)
            try socket.setHeartbeat(interval: transport.intervalMs, timeout: transport.timeoutMs, ttl: 0)
            try socket.connect(endpoint)
            sockets.append(socket)
        }
        // Standard input closing ends the run; a thread waits for it, since zmq_poll does not
        // report a pipe's hang-up.
        let closed = Atomic<Bool>(false)
        Thread {
            while readLine() != nil {}
            closed.store(true, ordering: .releasing)
        }.start()
        let started = ContinuousClock.now
        var welcomed = Set<Int>()
        var seen: [Set<String>] = Array(repeating: [], count: sockets.count)
        var received = 0, duplicates = 0, acked = 0, errors = 0, redirected = 0
        /// When the latest delivery came (CLOCK_MONOTONIC, nanoseconds, the same clock in every process).
        var lastReceived: UInt64 = 0
        var latencies: [Double] = []
        var lastHello = [ContinuousClock.Instant](repeating: .now - .seconds(3600), count: sockets.count)
        var reported = (0, 0, 0, 0, 0)
        var lastReport = ContinuousClock.now
        var welcomedReported = false
        // Every socket's ZMQ_FD in one epoll set: a turn costs the sockets that have something,
        // not all of them, as zmq_poll or a sweep would.
        let epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        defer { close(epoll) }
        for (index, socket) in sockets.enumerated() {
            var event = epoll_event()
            event.events = EPOLLIN.rawValue
            event.data.u32 = UInt32(index)
            _ = epoll_ctl(epoll, EPOLL_CTL_ADD, try socket.fileDescriptor, &event)
        }
        var events = [epoll_event](repeating: epoll_event(), count: 1_024)
        /// Reads what socket `index` has, acknowledging the deliveries in one message. Each read
        /// that finds nothing, and each look at ZMQ_EVENTS, costs libzmq a system call: so the
        /// socket is read until empty, and looked at once after the acknowledgement is sent.
        func drain(_ index: Int) throws {
            let socket = sockets[index]
            repeat {
            var ackIds: [String] = []
            while let frames = try socket.receive(wait: false) {
                switch try? AgentWire.decode(frames.last ?? Data(), installationId: ids[index]) {
                case .deliver(let delivery):
                    received += 1
                    if !seen[index].insert(delivery.deliveryId).inserted { duplicates += 1 }
                    if index == 0, let sent = sentAt(delivery.payload) {
                        latencies.append(Double(monotonicNanoseconds() - sent) / 1e6)
                    }
                    ackIds.append(delivery.deliveryId)
                case .welcome:
                    welcomed.insert(index)
                case .redirect(let redirect):
                    // Another dispatcher serves this installation: leave this one, hello there at the next pass.
                    redirected += 1
                    if redirect.endpoint != connectedTo[index] {
                        try? socket.disconnect(connectedTo[index])
                        try socket.connect(redirect.endpoint)
                        connectedTo[index] = redirect.endpoint
                    }
                    lastHello[index] = .now - .seconds(3600)
                case .error(let error):
                    errors += 1
                    if errors <= 3 { FileHandle.standardError.write(Data("fleet: \(ids[index]): \(error.code.rawValue): \(error.message)\n".utf8)) }
                default:
                    errors += 1
                }
            }
            if !ackIds.isEmpty {
                lastReceived = monotonicNanoseconds()
                _ = try socket.send(AgentWire.encode(.ack(AgentAck(deliveryIds: ackIds))), wait: false)
                acked += ackIds.count
            }
            } while try socket.hasIncoming
        }
        func emitStats() {
            emit([
                "event": "stats", "received": received, "duplicates": duplicates, "acked": acked, "errors": errors, "redirected": redirected,
                "lastReceivedNs": Int(lastReceived),
                "welcomed": welcomed.count,
            ])
        }
        var lastHelloPass = ContinuousClock.now - .seconds(1)
        while !closed.load(ordering: .acquiring) {
            // Hello until welcomed (quickly), then once a heartbeat. A send can leave input
            // pending without the descriptor saying so, hence the drain after it.
            let now = ContinuousClock.now
            if now - lastHelloPass > .milliseconds(100) {
                lastHelloPass = now
                for (index, socket) in sockets.enumerated() {
                    let interval: Duration = welcomed.contains(index) ? helloInterval : .milliseconds(500)
                    if lastHello[index] + interval <= now {
                        lastHello[index] = now
                        _ = try socket.send(AgentWire.encode(.hello(AgentHello(installationId: ids[index]))), wait: false)
                        try drain(index)
                    }
                }
            }
            let ready = epoll_wait(epoll, &events, Int32(events.count), 20)
            for slot in 0..<Int(max(0, ready)) { try drain(Int(events[slot].data.u32)) }
            if !welcomedReported && welcomed.count == sockets.count {
                welcomedReported = true
                emit(["event": "welcomed", "count": welcomed.count, "seconds": seconds(since: started)])
            }
            let counts = (received, duplicates, acked, errors, redirected)
            if counts != reported && ContinuousClock.now - lastReport > .milliseconds(100) {
                reported = counts
                lastReport = .now
                emitStats()
            }
        }
        emitStats()
        emit(["event": "latencies", "ms": latencies])
        for socket in sockets { socket.close() }
    }

    /// The send time a latency probe carries: `t=<monotonic nanoseconds>;` at the start of its property.
    static func sentAt(_ payload: String) -> UInt64? {
        guard let start = payload.range(of: "t="), let end = payload[start.upperBound...].firstIndex(of: ";") else { return nil }
        return UInt64(payload[start.upperBound..<end])
    }

    static func monotonicNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    static func emit(_ object: [String: Any]) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }
}
