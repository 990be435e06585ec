import Foundation
import HubProtocol
import ServiceKit

/// Where a shown notification goes: one JSON line on standard output, the configured hook
/// command, and a popup when a desktop is there.
final class AgentOutput {
    let hook: String?
    let logger: Logger
    /// The desktop's notification server, for the daemon; nil for one-shot commands.
    var desktop: DesktopNotifications?
    /// Off for one-shot commands, whose output is their own.
    var lines = true
    private var running: [Process] = []
    static let maxHooks = 16

    init(hook: String?, logger: Logger) {
        self.hook = hook?.isEmpty == false ? hook : nil
        self.logger = logger
    }

    /// Writes the notification out; false when standard output would not take its line (a full
    /// disk, a closed reader), so that it is not recorded as shown.
    @discardableResult
    func show(_ delivery: AgentDelivery, now: Date, richPath: String? = nil) -> Bool {
        let payload = JSONValue.parse(delivery.payload) ?? .string(delivery.payload)
        let (line, written) = writeLine(AgentLine.Notification(delivery, payload: payload, receivedAt: now, richPath: richPath))
        guard written else { return false }
        if let hook {
            runHook(hook, environment: [
                "NH_EVENT": "notification", "NH_DELIVERY_ID": delivery.deliveryId, "NH_NOTIFICATION_ID": delivery.notificationId,
                "NH_TEMPLATE": delivery.template ?? "", "NH_PAYLOAD": delivery.payload, "NH_RICH_PATH": richPath ?? "",
            ], line: line)
        }
        desktop?.show(Popup(delivery: delivery, payload: payload, richPath: richPath))
        return true
    }

    /// A line about the agent itself, such as a token being requested.
    func event(_ name: String, _ fields: [String: String]) {
        write(AgentLine.Event(event: name, fields: fields, at: Date()))
    }

    /// A per-user notification event: created, updated or deleted, with the notification as it is.
    func userEvent(_ name: String, _ notification: UserNotification) {
        let line = write(AgentLine.UserEvent(event: name, id: notification.id, notification: notification, at: Date()))
        if let hook {
            runHook(hook, environment: [
                "NH_EVENT": name, "NH_NOTIFICATION_ID": notification.id, "NH_READ_STATE": notification.readState.rawValue,
                "NH_USER_ACTION_STATE": notification.userActionState.rawValue,
            ], line: line)
        }
    }

    /// Writes one JSON line to standard output (unless lines are off) and returns it, for the hook.
    @discardableResult
    private func write(_ object: some Encodable) -> Data { writeLine(object).line }

    /// The line, and whether standard output took it.
    private func writeLine(_ object: some Encodable) -> (line: Data, written: Bool) {
        let line = HubCodec.encodeValue(object)
        guard lines else { return (line, true) }
        return (line, StandardStream.write(line + Data("\n".utf8), to: STDOUT_FILENO))
    }

    private func runHook(_ command: String, environment extra: [String: String], line: Data) {
        reap()
        if running.count >= AgentOutput.maxHooks, let oldest = running.first {
            oldest.waitUntilExit()
            reap()
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        process.environment = ProcessInfo.processInfo.environment.merging(extra) { $1 }
        let input = Pipe()
        process.standardInput = input
        do {
            try process.run()
            input.fileHandleForWriting.write(line + Data("\n".utf8))
            // A hook that exited before reading has closed the pipe already.
            try? input.fileHandleForWriting.close()
            running.append(process)
        } catch {
            logger.warning("hook did not start", ("command", command), ("error", "\(error)"))
        }
    }

    /// Collects finished hooks, logging failures.
    func reap() {
        running.removeAll { process in
            guard !process.isRunning else { return false }
            if process.terminationStatus != 0 {
                logger.warning("hook failed", ("status", process.terminationStatus))
            }
            return true
        }
    }
}
