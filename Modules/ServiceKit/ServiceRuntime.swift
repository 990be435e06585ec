import Foundation
import HubProtocol

/// What every part of a running service shares: its name, config, logger, loop and data folder,
/// its health, and what is closed at shutdown.
public final class ServiceRuntime {
    public let name: String
    public let config: HubConfig
    public let logger: Logger
    public let loop: EventLoop
    public let dataDirectory: URL
    public let startedAt = ContinuousClock.now
    /// Run at shutdown, last added first.
    private var closers: [() -> Void] = []

    public init(name: String, config: HubConfig, logger: Logger, loop: EventLoop, dataDirectory: URL) {
        self.name = name
        self.config = config
        self.logger = logger
        self.loop = loop
        self.dataDirectory = dataDirectory
    }

    public var uptimeSeconds: Double {
        startedAt.duration(to: .now).inSeconds
    }

    public func health(_ endpoints: [String: String], status: String = "ok", details: [String: String]? = nil) -> HealthReply {
        HealthReply(
            service: name, status: status, version: HubVersion.current, pid: getpid(), uptimeSeconds: uptimeSeconds,
            endpoints: endpoints, details: details)
    }

    /// A count for a health reply's details, or, when it cannot be read, why (which is then no
    /// gauge in the metrics, rather than a zero that looks true).
    public static func figure(_ read: () throws -> Int) -> String {
        do {
            return String(try read())
        } catch {
            return "unreadable: \(error)"
        }
    }

    /// `closer` runs at shutdown, before those added earlier.
    public func onShutdown(_ closer: @escaping () -> Void) {
        closers.append(closer)
    }

    func shutdown() {
        for closer in closers.reversed() { closer() }
        closers.removeAll()
    }
}
