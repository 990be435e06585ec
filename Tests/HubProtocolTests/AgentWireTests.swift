import Foundation
import HubProtocol
import Testing

/// The agent channel's compact frames: every message round-trips, and golden fixtures pin the
/// bytes (`Fixtures/agent-wire/<name>.frames`, one frame per line, escaped as JSON strings).
@Suite("Agent channel frames")
struct AgentWireTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/agent-wire")
    static let expiry = Date(timeIntervalSince1970: 1_800_000_000.123)

    static let samples: [(String, AgentFrame)] = [
        ("hello", .hello(AgentHello(installationId: "linux-1"))),
        ("ack", .ack(AgentAck(deliveryIds: ["n1/linux-1/default", "n2/linux-1/default"]))),
        ("ack-with-failures", .ack(AgentAck(deliveryIds: ["n1/linux-1/default"],
                                            failures: [DeliveryFailure(deliveryId: "n3/linux-1/native", reason: "rich fetch failed after 8 tries")]))),
        ("welcome", .welcome(AgentWelcome(installationId: "linux-1", pending: 3))),
        ("deliver", .deliver(AgentDelivery(
            deliveryId: "n1/linux-1/default", notificationId: "n1", installationId: "linux-1", template: "default",
            payload: #"{"message":"Breaking World News!"}"#, expiresAt: expiry))),
        ("deliver-native", .deliver(AgentDelivery(
            deliveryId: "n2/linux-1/native", notificationId: "n2", installationId: "linux-1", payload: "plain text", expiresAt: expiry))),
        ("deliver-rich", .deliver(AgentDelivery(
            deliveryId: "n3/linux-1/native", notificationId: "n3", installationId: "linux-1", payload: "{}", expiresAt: expiry,
            rich: RichReference(richId: "ab12", richType: "image", message: "A photo", contentType: "image/png", size: 1024),
            richTicket: "nhu1.claims.sig"))),
        ("signal", .signal(AgentSignal(userId: "alice", sequence: 42))),
        ("error", .error(ErrorReply(code: .forbidden, message: "installation 'linux-1' is bound to another device key"))),
    ]

    @Test("every message encodes exactly as its fixture and decodes back to itself", arguments: samples.indices)
    func fixture(index: Int) throws {
        let (name, frame) = Self.samples[index]
        let frames = AgentWire.encode(frame)
        let text = frames.map { frame -> String in
            let data = try! JSONSerialization.data(withJSONObject: String(decoding: frame, as: UTF8.self), options: [.fragmentsAllowed, .withoutEscapingSlashes])
            return String(decoding: data, as: UTF8.self)
        }.joined(separator: "\n") + "\n"
        let file = Self.directory.appendingPathComponent("\(name).frames")
        if ProcessInfo.processInfo.environment["NH_UPDATE_FIXTURES"] == "1" {
            try FileManager.default.createDirectory(at: Self.directory, withIntermediateDirectories: true)
            try Data(text.utf8).write(to: file)
        }
        #expect(try String(contentsOf: file, encoding: .utf8) == text, "frames of \(name) changed")
        var decoded = try AgentWire.decode(frames, installationId: "linux-1")
        if case .deliver(var delivery) = decoded {
            // The wire carries milliseconds.
            delivery.expiresAt = Self.expiry
            decoded = .deliver(delivery)
        }
        #expect(decoded == frame)
    }

    @Test("bad frames are refused with a code and a message that says what is wrong")
    func badFrames() {
        let cases: [([Data], ErrorCode, String)] = [
            ([], .malformedFrames, "no frames"),
            ([Data("nope".utf8)], .malformedFrames, "names no agent-channel message"),
            ([Data("hello".utf8), Data("9".utf8), Data("x".utf8)], .unsupportedVersion, "version '9'"),
            ([Data("hello".utf8), Data("1".utf8), Data()], .malformedFrames, "empty installation id"),
            ([Data("welcome".utf8), Data("x".utf8), Data("many".utf8)], .malformedFrames, "not a whole number"),
            ([Data("deliver".utf8), Data("a".utf8)], .malformedFrames, "it has 6, or 8"),
            (Array(repeating: Data("ack".utf8), count: 9), .malformedFrames, "no agent-channel message has more than 8"),
            ([Data("ack".utf8), Data([0xff, 0xfe])], .malformedFrames, "not UTF-8"),
        ]
        for (frames, code, text) in cases {
            #expect(throws: HubError.self) { try AgentWire.decode(frames) }
            do {
                _ = try AgentWire.decode(frames)
            } catch {
                #expect(error.code == code)
                #expect(error.message.contains(text), "\(error.message)")
            }
        }
    }
}
