import Foundation
import HubProtocol
import Testing

/// The agent channel's compact frames: every message round-trips, and golden fixtures pin the
/// bytes (`Fixtures/agent-wire/<name>.frame`, the frame as it goes on the wire).
@Suite("Agent channel frames")
struct AgentWireTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/agent-wire")
    static let expiry = Date(timeIntervalSince1970: 1_800_000_000.123)

    static let samples: [(String, AgentFrame)] = [
        ("hello", .hello(AgentHello(installationId: "linux-1"))),
        ("hello-registered", .hello(AgentHello(installationId: "linux-1", registered: 1_234))),
        ("ack", .ack(AgentAck(deliveryIds: ["n1/linux-1/default", "n2/linux-1/default"]))),
        ("ack-with-failures", .ack(AgentAck(deliveryIds: ["n1/linux-1/default"],
                                            failures: [DeliveryFailure(deliveryId: "n3/linux-1/native", reason: "rich fetch failed after 8 tries")]))),
        ("bye", .bye(AgentBye(installationId: "linux-1"))),
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
        ("redirect", .redirect(AgentRedirect(installationId: "linux-1", endpoint: "tcp://10.0.0.12:7722"))),
    ]

    @Test("every message encodes exactly as its fixture and decodes back to itself", arguments: samples.indices)
    func fixture(index: Int) throws {
        let (name, frame) = Self.samples[index]
        let encoded = AgentWire.encode(frame)
        let file = Self.directory.appendingPathComponent("\(name).frame")
        if ProcessInfo.processInfo.environment["NH_UPDATE_FIXTURES"] == "1" {
            try FileManager.default.createDirectory(at: Self.directory, withIntermediateDirectories: true)
            try encoded.write(to: file)
        }
        #expect(try Data(contentsOf: file) == encoded, "the frame of \(name) changed")
        var decoded = try AgentWire.decode(encoded, installationId: "linux-1")
        if case .deliver(var delivery) = decoded {
            // The wire carries milliseconds.
            delivery.expiresAt = Self.expiry
            decoded = .deliver(delivery)
        }
        #expect(decoded == frame)
    }

    @Test("deliveries encoded one after another are each the frame encoded alone; a notification's tail is written once while kept")
    func deliveryEncoder() throws {
        var encoder = AgentWire.DeliveryEncoder()
        let rich = RichReference(richId: "ab12", richType: "image", message: "A photo", contentType: "image/png", size: 1024)
        func delivery(_ notification: Int, _ agent: Int, variant: Int = 0, payload: String? = nil) -> AgentDelivery {
            AgentDelivery(
                deliveryId: "n\(notification)/a\(agent)/default", notificationId: "n\(notification)", installationId: "a\(agent)",
                template: variant == 1 ? "other" : variant == 6 ? nil : variant == 7 ? "" : "default",
                payload: payload ?? (variant == 2 ? "{\"m\":\"changed\"}" : "{\"m\":\"\(notification)\"}"),
                expiresAt: Self.expiry.addingTimeInterval(variant == 3 ? 0.001 : 0), rich: variant == 4 ? rich : nil,
                richTicket: variant == 5 ? "ticket-\(agent)" : nil)
        }
        func check(_ one: AgentDelivery, _ comment: Comment? = nil) throws {
            let frame = encoder.encode(one)
            #expect(frame == AgentWire.encodeDelivery(one), comment)
            #expect(try AgentWire.decode(frame, installationId: one.installationId) == AgentWire.decode(AgentWire.encodeDelivery(one), installationId: one.installationId))
        }
        // Ten notifications to fifty agents, each agent sent its ten in a row, as the dispatcher does.
        for agent in 0..<50 {
            for notification in 0..<10 { try check(delivery(notification, agent)) }
        }
        #expect(encoder.tailsWritten == 10, "each notification's tail written once")
        // Any field of the tail that differs is a tail of its own; a rich one is written whole, not kept.
        for variant in 1...7 { try check(delivery(3, 7, variant: variant), "variant \(variant)") }
        #expect(encoder.tailsWritten == 15, "template, payload, expiry, no template and an empty one: five tails")
        try check(delivery(3, 8, variant: 6))
        try check(delivery(3, 8, variant: 7))
        #expect(encoder.tailsWritten == 15, "no template and an empty one are kept apart")
        // The same payload under another notification, and payloads equal as strings but not as bytes.
        try check(delivery(1_000, 1, payload: "{\"m\":\"3\"}"))
        try check(delivery(1_001, 1, payload: "caf\u{E9}"))
        try check(delivery(1_001, 2, payload: "cafe\u{301}"))
        #expect(encoder.tailsWritten == 18)
        #expect(encoder.encode(delivery(1_001, 3, payload: "cafe\u{301}")).suffix(6) == Data("cafe\u{301}".utf8))
        // More notifications at once than are kept: every frame is still right, and tails are written again.
        let before = encoder.tailsWritten
        for agent in 0..<3 {
            for notification in 0..<70 { try check(delivery(100 + notification, agent)) }
        }
        #expect(encoder.tailsWritten == before + 3 * 70, "70 notifications in turn outrun 64 kept tails")
        // A tail too large to keep is written each time.
        let large = String(repeating: "x", count: 20_000)
        try check(delivery(2_000, 1, payload: large))
        try check(delivery(2_000, 2, payload: large))
        #expect(encoder.tailsWritten == before + 3 * 70 + 2)
    }

    @Test("lines split on the newline byte only: empty ack lines are passed over, the last field keeps its newlines")
    func lines() throws {
        let ack = try AgentWire.decode(Data("ack\n\nd1\n\n!d2\twhy\tnot\nd\u{e9}3".utf8))
        #expect(ack == .ack(AgentAck(deliveryIds: ["d1", "dé3"], failures: [DeliveryFailure(deliveryId: "d2", reason: "why\tnot")])))
        #expect(try AgentWire.decode(Data("ack".utf8)) == .ack(AgentAck(deliveryIds: [])))
        let frame = "deliver\nd\u{e9}\nn\n\n1000\n\n\nline 1\n\nline 3 \u{1F600}\n"
        guard case .deliver(let delivery) = try AgentWire.decode(Data(frame.utf8), installationId: "i") else {
            Issue.record("not a delivery")
            return
        }
        #expect(delivery.deliveryId == "dé" && delivery.template == nil && delivery.payload == "line 1\n\nline 3 \u{1F600}\n")
        #expect(AgentWire.encode(.deliver(delivery)) == Data(frame.utf8))
    }

    @Test("bad frames are refused with a code and a message that says what is wrong")
    func badFrames() {
        let cases: [(String, ErrorCode, String)] = [
            ("", .malformedFrames, "empty"),
            ("nope", .malformedFrames, "names no agent-channel message"),
            ("hello\n9\nx", .unsupportedVersion, "version '9'"),
            ("hello\n1\n", .malformedFrames, "one installation id"),
            ("hello", .malformedFrames, "has 0 of its 2 fields"),
            ("hello\n1\nx\nsoon", .malformedFrames, "registered version 'soon' is not a whole number"),
            ("bye", .malformedFrames, "has 0 of its 1 fields"),
            ("bye\n", .malformedFrames, "'bye' needs one installation id"),
            ("bye\nlinux-1\nlinux-2", .malformedFrames, "'bye' needs one installation id"),
            ("welcome\nx\nmany", .malformedFrames, "not a whole number"),
            ("deliver\na\nb", .malformedFrames, "has 2 of its 7 fields"),
            ("deliver\na\nb\nt\nsoon\n\n\n{}", .malformedFrames, "expiry (milliseconds since 1970) 'soon'"),
            ("ack\n!a no tab", .malformedFrames, "needs a tab"),
            ("redirect\nlinux-1\nsomewhere", .malformedFrames, "tcp:// or ipc:// endpoint"),
        ]
        for (frame, code, text) in cases {
            #expect(throws: HubError.self) { try AgentWire.decode(Data(frame.utf8)) }
            do {
                _ = try AgentWire.decode(Data(frame.utf8))
            } catch {
                #expect(error.code == code)
                #expect(error.message.contains(text), "\(error.message)")
            }
        }
        #expect(throws: HubError.self) { try AgentWire.decode(Data([0xff, 0xfe])) }
    }
}
