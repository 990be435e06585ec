import Foundation

/// The MQTT reference: a Mosquitto broker on a free loopback port, with Mosquitto's own C clients
/// publishing and subscribing at QoS 0, the closest MQTT analogue of a ZeroMQ PUB/SUB hop.
enum MosquittoBench {
    static let name = "Mosquitto QoS 0 pub → broker → sub"

    static func publishSubscribe(_ settings: BenchSettings) -> BenchResult {
        func skipped(_ why: String) -> BenchResult {
            BenchResult(name: name, unit: "msg/s", count: 0, seconds: 0, baseline: RawZMQBench.pushPullName, note: "skipped: \(why)")
        }
        guard let broker = which("mosquitto", extra: ["/usr/sbin"]), let pub = which("mosquitto_pub"),
            let sub = which("mosquitto_sub")
        else { return skipped("mosquitto and mosquitto-clients are not installed (make deps)") }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-bench-mqtt-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let port = freePort()
        let config = folder.appendingPathComponent("mosquitto.conf")
        try? "listener \(port) 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\npersistence false\n"
            .write(to: config, atomically: true, encoding: .utf8)
        let count = settings.messages
        let line = String(repeating: "a", count: max(1, settings.size - 1)) + "\n"
        let input = folder.appendingPathComponent("messages.txt")
        guard FileManager.default.createFile(atPath: input.path, contents: Data(String(repeating: line, count: count).utf8)) else {
            return skipped("cannot write the message file")
        }

        guard let brokerProcess = try? launch(broker, ["-c", config.path], folder: folder) else {
            return skipped("mosquitto did not start")
        }
        defer { brokerProcess.terminate(); brokerProcess.waitUntilExit() }
        Thread.sleep(forTimeInterval: 0.3)
        guard let subscriber = try? launch(sub, ["-h", "127.0.0.1", "-p", "\(port)", "-t", "bench", "-C", "\(count)", "-q", "0"], folder: folder)
        else { return skipped("mosquitto_sub did not start") }
        Thread.sleep(forTimeInterval: 0.3)
        let start = ContinuousClock.now
        guard let publisher = try? launch(pub, ["-h", "127.0.0.1", "-p", "\(port)", "-t", "bench", "-q", "0", "-l"], folder: folder, input: input)
        else { return skipped("mosquitto_pub did not start") }
        let deadline = Date().addingTimeInterval(120)
        while subscriber.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.001) }
        let elapsed = seconds(since: start)
        let finished = !subscriber.isRunning
        if subscriber.isRunning { subscriber.terminate() }
        if publisher.isRunning { publisher.terminate() }
        publisher.waitUntilExit()
        subscriber.waitUntilExit()
        return BenchResult(
            name: name, unit: "msg/s", count: finished ? count : 0, seconds: elapsed, baseline: RawZMQBench.pushPullName,
            note: finished ? "C clients, process start included" : "subscriber did not receive all \(count)")
    }

    static func launch(_ path: String, _ arguments: [String], folder: URL, input: URL? = nil) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        if let input { process.standardInput = try FileHandle(forReadingFrom: input) }
        try process.run()
        return process
    }

    static func which(_ name: String, extra: [String] = []) -> String? {
        let paths = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map(String.init) + extra
        return paths.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
