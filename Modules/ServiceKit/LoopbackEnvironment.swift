import Bus
import Foundation
import Synchronization

/// Environment variables that put every service of one hub on free loopback ports with its own
/// data folder: what tests and benchmarks use to run the real executables side by side.
public enum LoopbackEnvironment {
    public static func make(dataDirectory: URL, logLevel: String = "info", base: [String: String] = ProcessInfo.processInfo.environment)
        throws -> [String: String]
    {
        var environment = base.filter { !$0.key.hasPrefix("NH_") }
        environment["NH_DATA_DIR"] = dataDirectory.path
        environment["NH_LOG_LEVEL"] = logLevel
        let defaults = HubConfig()
        for (section, endpoints) in [
            ("registry", defaults.registry), ("publish", defaults.publish), ("dispatch", defaults.dispatch),
            ("sync", defaults.sync), ("agent", defaults.agent), ("gateway", defaults.gateway),
        ] {
            for (key, value) in [("requests", endpoints.requests), ("events", endpoints.events), ("agents", endpoints.agents)]
            where value != nil {
                environment[ConfigLoader.variableName([section, key])] = try freeEndpoint()
            }
        }
        return environment
    }

    /// A loopback TCP endpoint whose port nothing listens on now, and which this process has not
    /// handed out before (tests running side by side in one process each get their own). It is
    /// taken below the kernel's range of ephemeral ports, so that the outgoing connections of other
    /// processes (thousands, for a fleet of simulated agents) cannot take it before the service binds it.
    public static func freeEndpoint() throws -> String {
        let socket = try ZMQContext.shared.socket(.router)
        defer { socket.close() }
        let low = ephemeralPortsStart()
        if low > 11_000 {
            for _ in 0..<64 {
                let port = Int.random(in: 10_000..<low)
                guard handedOut.withLock({ $0.insert(port).inserted }) else { continue }
                let endpoint = "tcp://127.0.0.1:\(port)"
                if (try? socket.bind(endpoint)) != nil { return endpoint }
            }
        }
        try socket.bind("tcp://127.0.0.1:*")
        return socket.lastEndpoint
    }

    /// The ports `freeEndpoint` has handed out in this process.
    private static let handedOut = Mutex<Set<Int>>([])

    /// The first port of the kernel's ephemeral range (32768 when it cannot be read).
    static func ephemeralPortsStart() -> Int {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        return text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { Int($0) } ?? 32_768
    }
}
