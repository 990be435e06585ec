import DispatchCore
import Foundation
import Testing

/// The protocol README's numbers are the code's: a change to either fails here until both agree.
@Suite("The protocol README and the dispatcher agree")
struct ProtocolReadmeTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        // Lines joined, so a sentence reads the same wherever it wraps.
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
            .split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
    }

    static func word(_ n: Int) -> String { ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight"][n] }

    static func grouped(_ n: Int) -> String {
        let formatter = NumberFormatter()
        formatter.numberStyle = .decimal
        formatter.groupingSeparator = ","
        return formatter.string(from: NSNumber(value: n)) ?? String(n)
    }

    @Test("sessions, windows, queues and resends as the README gives them")
    func agentChannel() throws {
        let readme = try Self.text("Modules/HubProtocol/README.md")
        let defaults = try JSONSerialization.jsonObject(with: Data(contentsOf: Self.root.appendingPathComponent("deploy/hub.defaults.json"))) as? [String: Any]
        let heartbeatMs = try #require(defaults?["agentHeartbeatMs"] as? Int)
        let settings = DispatcherSettings(agentHeartbeat: Double(heartbeatMs) / 1000, maxAgents: 1)
        let sentences = [
            "not acknowledged within \(Self.word(DispatcherSettings.resendHeartbeats)) `agentHeartbeatMs` or \(Int(DispatcherSettings.maxResendAfter)) s, whichever is less (\(Int(settings.resendAfter)) s by default), is sent again",
            "doubling intervals up to a minute",
            "ends a session after \(Self.word(DispatcherSettings.silenceHeartbeats)) heartbeats of silence",
            "At most \(settings.window) deliveries are in flight per session",
            "wait in memory (up to \(Self.grouped(settings.queueLimit)))",
            "at most \(Self.grouped(settings.maxResendsPerTick)) resends a tick",
            "every `agentHeartbeatMs` (\(heartbeatMs / 1000) s by default)",
        ]
        for sentence in sentences { #expect(readme.contains(sentence), "the README does not say: \(sentence)") }
        #expect(settings.maxResendInterval == 60)
        #expect(settings.silenceAfter == max(2, Double(heartbeatMs) / 1000 * 3))
        #expect(settings.resendAfter == min(DispatcherSettings.maxResendAfter, Double(heartbeatMs) / 1000 * 6))
    }
}
