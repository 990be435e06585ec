import DBus
import Foundation
import ServiceKit

/// The agent's one connection to the desktop session's bus, shared by the popups and the
/// UnifiedPush distributor, served from the agent's loop: processed when readable, and every
/// 100 ms for timeouts and queued writes. A lost bus is tried again every 5 s; each user hears of
/// every connection and every loss. The bus is found in the environment and never started.
final class SessionBus {
    static let reconnectEvery: TimeInterval = 5

    let address: String?
    private let logger: Logger
    let loop: EventLoop
    private(set) var connection: DBusConnection?
    /// Why the bus cannot be reached, while it cannot.
    private(set) var unreachable: String?
    private var users: [(connected: (DBusConnection) throws -> Void, disconnected: () -> Void)] = []
    private var watch: Int?
    private var lastAttempt: Date?

    init(environment: [String: String], logger: Logger, loop: EventLoop) {
        address = DBusConnection.sessionAddress(environment: environment)
        self.logger = logger
        self.loop = loop
    }

    /// `connected` runs on each new connection (to add matches, export objects, ask for names),
    /// `disconnected` when it is lost. A `connected` that throws counts as a failed connection.
    func use(connected: @escaping (DBusConnection) throws -> Void, disconnected: @escaping () -> Void) {
        users.append((connected, disconnected))
    }

    /// Connects when anyone uses the bus and there is one.
    func start() {
        guard !users.isEmpty, address != nil, watch == nil else { return }
        watch = loop.watch(fileDescriptor: -1) { [unowned self] in self.pump() }
        connect()
        loop.every(milliseconds: 100) { [unowned self] in
            if self.connection == nil { self.connect() } else { self.pump() }
        }
    }

    private func connect() {
        guard let address else { return }
        let now = Date()
        if let lastAttempt, now.timeIntervalSince(lastAttempt) < Self.reconnectEvery { return }
        lastAttempt = now
        do {
            let connection = try DBusConnection(address: address)
            self.connection = connection
            do {
                for user in users { try user.connected(connection) }
            } catch {
                self.connection = nil
                connection.close()
                for user in users { user.disconnected() }
                throw error
            }
            loop.rewatch(watch!, fileDescriptor: connection.fileDescriptor)
            if unreachable != nil { logger.notice("desktop session bus reachable again", ("address", address)) }
            unreachable = nil
        } catch {
            if unreachable == nil {
                logger.warning("desktop session bus not reachable; trying again every 5 s", ("address", address), ("error", "\(error)"))
            }
            unreachable = "\(error)"
        }
    }

    private func pump() {
        guard let connection else { return }
        do {
            try connection.process()
        } catch {
            disconnected("\(error)")
        }
    }

    private func disconnected(_ reason: String) {
        guard let connection else { return }
        logger.warning("desktop session bus connection lost; reconnecting", ("error", reason))
        unreachable = reason
        self.connection = nil
        loop.rewatch(watch!, fileDescriptor: -1)
        connection.close()
        for user in users { user.disconnected() }
    }
}
