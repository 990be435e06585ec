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
        let start = ContinuousClock.now
        for child in children { child.input.fileHandleForWriting.write(Data("go\n".utf8)) }
        var echoed = 0
        for child in children { echoed += Int(readLine(child.output) ?? "") ?? 0 }
        let elapsed = seconds(since: start)
        for child in children { child.process.waitUntilExit() }
        var overflows: Int?
        if let before = overflowsBefore, let after = listenOverflows() { overflows = after - before }
        return Outcome(seconds: elapsed, echoed: echoed, overflows: overflows)
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
    /// waits for `go`, connects them all and prints how many were echoed.
    static func clients(_ arguments: [String]) throws {
        guard arguments.count == 4, let count = Int(arguments[0]), let timeout = Double(arguments[3]) else {
            throw BenchError("usage: nh-bench curve-clients COUNT ENDPOINT SERVERKEY TIMEOUT")
        }
        let pairs = try (0..<count).map { _ in try CurveKeyPair.generate() }
        FileHandle.standardOutput.write(Data("ready\n".utf8))
        guard Swift.readLine() == "go" else { return }
        FileHandle.standardOutput.write(Data("\(echo(pairs, endpoint: arguments[1], serverKey: arguments[2], timeout: timeout))\n".utf8))
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
