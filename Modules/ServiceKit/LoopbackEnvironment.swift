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
        let low = ephemeralPortsStart()
        if low > 11_000 {
            for _ in 0..<64 {
                let port = Int.random(in: 10_000..<low)
                guard handedOut.withLock({ $0.insert(port).inserted }) else { continue }
                if isFree(port) { return "tcp://127.0.0.1:\(port)" }
            }
        }
        let socket = try ZMQContext.shared.socket(.router)
        defer { socket.close() }
        try socket.bind("tcp://127.0.0.1:*")
        return socket.lastEndpoint
    }

    /// Whether a TCP socket can be bound to the loopback `port` now. The probe is a plain socket,
    /// closed before this returns, so the port is free again at once for a bind in this process
    /// (a ZeroMQ socket lets go of its port later, on its I/O thread).
    static func isFree(_ port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(UInt32(0x7F00_0001).bigEndian)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    /// The ports `freeEndpoint` has handed out in this process.
    private static let handedOut = Mutex<Set<Int>>([])

    /// The first port of the kernel's ephemeral range (32768 when it cannot be read).
    static func ephemeralPortsStart() -> Int {
        // Absent on a kernel without the file: the usual start is assumed.
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        return text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { Int($0) } ?? 32_768
    }
}
