import Foundation
import HubProtocol
import ServiceKit

/// Where a shown notification goes: one JSON line on standard output, the configured hook
/// command, and a desktop notification when a desktop session is there.
final class AgentOutput {
    let hook: String?
    let logger: Logger
    let desktop: Bool
    private var running: [Process] = []
    static let maxHooks = 16

    init(hook: String?, logger: Logger, environment: [String: String]) {
        self.hook = hook?.isEmpty == false ? hook : nil
        self.logger = logger
        let hasSession = environment["DISPLAY"] != nil || environment["WAYLAND_DISPLAY"] != nil
        desktop = hasSession && environment["NH_AGENT_DESKTOP"] != "0" && AgentOutput.which("notify-send") != nil
    }

    func show(_ delivery: AgentDelivery, now: Date) {
        let payload = (try? JSONSerialization.jsonObject(with: Data(delivery.payload.utf8), options: [.fragmentsAllowed]))
            ?? delivery.payload
        var object: [String: Any] = [
            "event": "notification", "deliveryId": delivery.deliveryId, "notificationId": delivery.notificationId,
            "installationId": delivery.installationId, "payload": payload, "receivedAt": WireDate.format(now),
            "expiresAt": WireDate.format(delivery.expiresAt),
        ]
        if let template = delivery.template { object["template"] = template }
        let line = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data()
        FileHandle.standardOutput.write(line + Data("\n".utf8))
        if let hook { runHook(hook, delivery: delivery, line: line) }
        if desktop { notifyDesktop(payload) }
    }

    private func runHook(_ command: String, delivery: AgentDelivery, line: Data) {
        reap()
        if running.count >= AgentOutput.maxHooks, let oldest = running.first {
            oldest.waitUntilExit()
            reap()
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        var environment = ProcessInfo.processInfo.environment
        environment["NH_DELIVERY_ID"] = delivery.deliveryId
        environment["NH_NOTIFICATION_ID"] = delivery.notificationId
        environment["NH_TEMPLATE"] = delivery.template ?? ""
        environment["NH_PAYLOAD"] = delivery.payload
        process.environment = environment
        let input = Pipe()
        process.standardInput = input
        do {
            try process.run()
            input.fileHandleForWriting.write(line + Data("\n".utf8))
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

    private func notifyDesktop(_ payload: Any) {
        let object = payload as? [String: Any] ?? [:]
        let nested = (object["aps"] as? [String: Any])?["alert"]
        let title = object["title"] as? String ?? "Notification"
        let body = (object["message"] ?? object["body"] ?? object["alert"] ?? nested).map { "\($0)" }
            ?? (payload as? String ?? "")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: AgentOutput.which("notify-send") ?? "/usr/bin/notify-send")
        process.arguments = ["--app-name=nh-agent", title, body]
        try? process.run()
    }

    static func which(_ name: String) -> String? {
        (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
            .map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }
}
