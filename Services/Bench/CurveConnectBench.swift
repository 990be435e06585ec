import Bus
import CMosquitto
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The floor under the hub's connect figure: N CURVE DEALERs connecting to a bare libzmq CURVE
/// ROUTER (no ZAP, no hello: it echoes each message) on the same machine, from clients shaped as
/// the fan-out's simulated agents are (processes of 2,500 sockets, one I/O thread each, each
/// socket sending again every 500 ms until answered, as an agent's hello), the server with two
/// I/O threads as the dispatcher has; the seconds until every DEALER has had a message echoed.
/// With it, the TCP connections the kernel's accept queue dropped meanwhile (`ListenOverflows`),
/// which the clients retry a second or more later.
enum CurveConnectBench {
    static func name(n: Int) -> String { "libzmq CURVE alone: connect \(n.formatted()), one echo each" }

    struct Outcome {
        var seconds: Double
        var echoed: Int
        var overflows: Int?
        /// CPU seconds over the connecting, of the server (this process) and of the client processes.
        var serverCPU: Double?
        var clientCPU: Double?
    }

    /// curve25519 operations in one CURVE handshake, both sides together. Each side makes a
    /// short-term key pair, seals or opens HELLO, WELCOME, INITIATE and the vouch inside it, each
    /// a key agreement of its own, and agrees the key for the messages that follow: 10 key
    /// agreements and 2 key pairs, 6 on each side (counted with uprobes on libsodium's
    /// crypto_scalarmult_curve25519 and _base during `nh-bench curve-connect`).
    static let operationsPerHandshake = 12
    static let serverOperationsPerHandshake = 6

    /// The seconds one curve25519 operation takes here, at least: `zmq_curve_public` (libsodium's
    /// crypto_scalarmult_base), the mean of `count` calls. A key pair is this operation; a key
    /// agreement (variable base) takes as long or longer, so a floor made of it is if anything low.
    static func operationSeconds(count: Int = 2_000) throws -> Double {
        let secret = try CurveKeyPair.generate().secretKey
        let start = ContinuousClock.now
        for _ in 0..<count { _ = try CurveKeyPair.publicKey(forSecret: secret) }
        return seconds(since: start) / Double(max(1, count))
    }

    /// The least time `operations` curve25519 operations of `seconds` each take on `cores` cores.
    static func arithmeticSeconds(operations: Int, seconds: Double, cores: Int) -> Double {
        Double(operations) * seconds / Double(max(1, cores))
    }

    static func floorName(n: Int) -> String { "curve25519 arithmetic of \(n.formatted()) CURVE handshakes" }

    /// The bare connect figure, and beside it the least time the handshakes' curve25519 operations
    /// alone take on this machine's `cores` cores, from one operation timed in the same run.
    static func results(
        n: Int, outcome: Outcome, operationSeconds: Double? = try? CurveConnectBench.operationSeconds(),
        cores: Int = ProcessInfo.processInfo.activeProcessorCount
    ) -> [BenchResult] {
        var note = "\(outcome.echoed.formatted()) of \(n.formatted()) echoed; server with 2 I/O threads, clients of \(FanoutBench.perProcess.formatted()) sockets"
        if let overflows = outcome.overflows { note += "; \(overflows.formatted()) connections dropped by a full accept queue and retried" }
        if let server = outcome.serverCPU, let clients = outcome.clientCPU {
            note += "; CPU s: server \(BenchReport.format(server, decimals: 2)), clients \(BenchReport.format(clients, decimals: 2))"
        }
        var results = [BenchResult(name: name(n: n), unit: "s", count: 0, seconds: 0, value: outcome.seconds, note: note)]
        if let operationSeconds {
            let server = arithmeticSeconds(operations: n * serverOperationsPerHandshake, seconds: operationSeconds, cores: cores)
            results.append(BenchResult(
                name: floorName(n: n), unit: "s", count: 0, seconds: 0,
                value: arithmeticSeconds(operations: n * operationsPerHandshake, seconds: operationSeconds, cores: cores),
                note: "the least time to connect with both ends on this machine: \(operationsPerHandshake) curve25519 operations a handshake "
                    + "(\(serverOperationsPerHandshake) each side) at \(String(format: "%.1f", operationSeconds * 1e6)) µs each, timed here, "
                    + "on \(cores) core\(cores == 1 ? "" : "s"); the server's alone: \(BenchReport.format(server, decimals: 2)) s"))
        }
        return results
    }

    static func run(agents: Int, perClient: Int = FanoutBench.perProcess, timeout: TimeInterval = 120) throws -> Outcome {
        let serverContext = ZMQContext(ioThreads: 2, maxSockets: 64)
        let keys = try CurveKeyPair.generate()
        let bound = Mutex<Result<String, ZMQError>?>(nil)
        let ready = DispatchSemaphore(value: 0)
        let stop = Atomic<Bool>(false)
        let server = spawn {
            do throws(ZMQError) {
                let router = try serverContext.socket(.router)
                defer { router.close() }
                try router.setLinger(0)
                try router.makeCurveServer(keys, domain: "bench")
                try router.setBacklog(65_535)
                try router.bind("tcp://127.0.0.1:*")
                bound.withLock { $0 = .success(router.lastEndpoint) }
                ready.signal()
                var poller = Poller()
                _ = poller.add(router)
                while !stop.load(ordering: .acquiring) {
                    _ = try? poller.poll(timeout: 50)
                    while let frames = try? router.receive(wait: false) { _ = try? router.send(frames, wait: false) }
                }
            } catch {
                bound.withLock { $0 = .failure(error) }
                ready.signal()
            }
        }
        ready.wait()
        defer {
            stop.store(true, ordering: .releasing)
            server.wait()
        }
        let endpoint = try bound.withLock { $0! }.get()
        // The clients are processes, as the simulated agents are: a process's descriptors would
        // not hold both ends of N connections. Each makes its keys, then connects on the word.
        var children: [(process: Process, input: Pipe, output: Pipe)] = []
        defer {
            for child in children where child.process.isRunning { child.process.terminate() }
        }
        for count in stride(from: 0, to: agents, by: perClient).map({ min(perClient, agents - $0) }) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            process.arguments = ["curve-clients", String(count), endpoint, keys.publicKey, String(Int(timeout))]
            let input = Pipe(), output = Pipe()
            process.standardInput = input
            process.standardOutput = output
            try process.run()
            children.append((process, input, output))
        }
        for child in children where readLine(child.output) != "ready" { throw BenchError("a CURVE client process did not start") }
        let overflowsBefore = listenOverflows()
        func cpu() -> (server: Double?, clients: Double?) {
            let clients = children.map { ProcessCPU.seconds($0.process.processIdentifier) }
            return (ProcessCPU.seconds(getpid()), clients.contains { $0 == nil } ? nil : clients.reduce(0) { $0 + $1! })
        }
        let cpuBefore = cpu()
        let start = ContinuousClock.now
        for child in children { child.input.fileHandleForWriting.write(Data("go\n".utf8)) }
        var echoed = 0
        // Each client prints its count and waits for the word to exit, so that its CPU can be read.
        for child in children { echoed += Int(readLine(child.output) ?? "") ?? 0 }
        let elapsed = seconds(since: start)
        let cpuAfter = cpu()
        for child in children {
            try? child.input.fileHandleForWriting.close()
            child.process.waitUntilExit()
        }
        let overflows = ProcessCPU.growth(from: overflowsBefore, to: listenOverflows())
        return Outcome(
            seconds: elapsed, echoed: echoed, overflows: overflows,
            serverCPU: ProcessCPU.growth(from: cpuBefore.server, to: cpuAfter.server),
            clientCPU: ProcessCPU.growth(from: cpuBefore.clients, to: cpuAfter.clients))
    }

    /// One line from `pipe`, without its newline; nil at its end.
    private static func readLine(_ pipe: Pipe) -> String? {
        var line = Data()
        while true {
            let byte = pipe.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty { return line.isEmpty ? nil : String(decoding: line, as: UTF8.self) }
            if byte[0] == 0x0a { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
    }

    /// `nh-bench curve-clients COUNT ENDPOINT SERVERKEY TIMEOUT`: makes COUNT keys, says `ready`,
    /// waits for `go`, connects them all, prints how many were echoed, and exits when its input
    /// closes.
    static func clients(_ arguments: [String]) throws {
        guard arguments.count == 4, let count = Int(arguments[0]), let timeout = Double(arguments[3]) else {
            throw BenchError("usage: nh-bench curve-clients COUNT ENDPOINT SERVERKEY TIMEOUT")
        }
        let pairs = try (0..<count).map { _ in try CurveKeyPair.generate() }
        FileHandle.standardOutput.write(Data("ready\n".utf8))
        guard Swift.readLine() == "go" else { return }
        FileHandle.standardOutput.write(Data("\(echo(pairs, endpoint: arguments[1], serverKey: arguments[2], timeout: timeout))\n".utf8))
        while Swift.readLine() != nil {}
    }

    /// One client: its sockets connect and each sends one message; returns how many were echoed
    /// before `timeout`.
    private static func echo(_ pairs: [CurveKeyPair], endpoint: String, serverKey: String, timeout: TimeInterval) -> Int {
        let context = ZMQContext(ioThreads: 1, maxSockets: pairs.count + 64)
        var sockets: [ZMQSocket] = []
        let epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        defer {
            close(epoll)
            for socket in sockets { socket.close() }
        }
        do {
            for (index, pair) in pairs.enumerated() {
                let socket = try context.socket(.dealer)
                try socket.setLinger(0)
                try socket.makeCurveClient(pair, serverPublicKey: serverKey)
                try socket.connect(endpoint)
                _ = try socket.send(Data("hello".utf8), wait: false)
                var event = epoll_event()
                event.events = EPOLLIN.rawValue
                event.data.u32 = UInt32(index)
                _ = epoll_ctl(epoll, EPOLL_CTL_ADD, try socket.fileDescriptor, &event)
                sockets.append(socket)
            }
        } catch {
            return 0
        }
        var done = [Bool](repeating: false, count: sockets.count)
        var count = 0
        var events = [epoll_event](repeating: epoll_event(), count: 1_024)
        let deadline = ContinuousClock.now + .seconds(timeout)
        func drain(_ index: Int) {
            while (try? sockets[index].hasIncoming) == true, (try? sockets[index].receive(wait: false)) != nil {
                if !done[index] {
                    done[index] = true
                    count += 1
                }
            }
        }
        // ZMQ_FD only hints, and a send may have taken its signal: every 100 ms the sockets still
        // waiting are looked at too, and every 500 ms they send again (a message queued on a
        // connection that failed is lost with it), as the simulated agents' hellos do.
        var sweptAt = ContinuousClock.now
        var sentAt = ContinuousClock.now
        while count < sockets.count && ContinuousClock.now < deadline {
            let ready = epoll_wait(epoll, &events, Int32(events.count), 20)
            for slot in 0..<Int(max(0, ready)) { drain(Int(events[slot].data.u32)) }
            if ContinuousClock.now - sweptAt > .milliseconds(100) {
                let resend = ContinuousClock.now - sentAt > .milliseconds(500)
                sweptAt = .now
                if resend { sentAt = .now }
                for index in sockets.indices where !done[index] {
                    if resend { _ = try? sockets[index].send(Data("hello".utf8), wait: false) }
                    drain(index)
                }
            }
        }
        return count
    }

    /// TCP connections dropped because an accept queue was full, machine-wide (TcpExt ListenOverflows).
    static func listenOverflows() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/net/netstat", encoding: .utf8) else { return nil }
        let lines = text.split(separator: "\n")
        for (index, line) in lines.enumerated() where line.hasPrefix("TcpExt:") && index + 1 < lines.count {
            let names = line.split(separator: " ")
            let values = lines[index + 1].split(separator: " ")
            guard let column = names.firstIndex(of: "ListenOverflows"), column < values.count else { return nil }
            return Int(values[column])
        }
        return nil
    }
}
