import Foundation
import HubProtocol
import Testing

/// Each message type's wire form is pinned by `Fixtures/<type>.json`. A change to a message's
/// shape fails here until the fixture is regenerated on purpose:
/// `NH_UPDATE_FIXTURES=1 swift test --filter GoldenFixtureTests`.
@Suite("Golden wire fixtures")
struct GoldenFixtureTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    @Test("every message encodes exactly as its fixture and decodes back to itself", arguments: Samples.all.indices)
    func fixture(index: Int) throws {
        try check(Samples.all[index])
    }

    @Test("every message type has one sample and one fixture, and no fixture is left over")
    func coverage() throws {
        let types = Samples.all.map { type(of: $0).messageType.rawValue }
        #expect(Set(types).count == types.count)
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.directory.path)
            .filter { $0.hasSuffix(".json") }.map { String($0.dropLast(5)) }
        #expect(Set(files) == Set(types))
    }

    /// Headers the codec writes around the payload (plain ASCII) and ones it leaves to the encoder
    /// (a quote, a backslash, a control character, non-ASCII), with and without auth.
    static let headers: [(id: String, auth: String?)] = [
        ("fixture-1", "token"), ("7", nil), ("a/b c~", "SharedAccessSignature sr=http%3a%2f%2fh%2fhub&sig=a%2bb%3d&se=1&skn=Full"),
        (#"say "hi""#, nil), (#"back\slash"#, "token"), ("tab\there", nil), ("", "naïve"), ("ok", "line\nbreak"), ("del\u{7f}", nil),
    ]

    @Test("every message is written exactly as the encoder writes its whole envelope, and read back, whatever its header holds",
        arguments: Samples.all.indices)
    func writtenAsTheEncoderWrites(index: Int) throws {
        try sameAsEncoder(Samples.all[index])
    }

    /// Hubs an envelope may name: none (the default hub), a plain one, and ones the encoder escapes.
    static let hubs: [String?] = [nil, "news.b", #"q"uote"#, "naïve"]

    func sameAsEncoder<M: HubMessage>(_ message: M) throws {
        let whole = HubCodec.makeEncoder()
        for ((id, auth), hub) in Self.headers.flatMap({ header in Self.hubs.map { (header, $0) } }) {
            let envelope = Envelope(id: id, auth: auth, hub: hub, payload: message)
            let encoded = HubCodec.encode(envelope)
            #expect(encoded == (try whole.encode(envelope)), "\(M.messageType), id \(id), auth \(auth ?? "none"), hub \(hub ?? "none")")
            #expect(try HubCodec.decode(M.self, from: encoded) == envelope)
            // An error reply is read as the error it carries.
            if M.messageType != ErrorReply.messageType { #expect(try HubCodec.decodeReply(M.self, from: encoded) == envelope) }
        }
    }

    func check<M: HubMessage>(_ message: M) throws {
        let encoded = HubCodec.encode(message, id: "fixture-1", auth: "token")
        let file = Self.directory.appendingPathComponent("\(M.messageType.rawValue).json")
        if ProcessInfo.processInfo.environment["NH_UPDATE_FIXTURES"] == "1" {
            try (encoded + Data("\n".utf8)).write(to: file)
        }
        let fixture = try Data(contentsOf: file)
        let text = String(decoding: fixture, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(String(decoding: encoded, as: UTF8.self) == text, "wire format of \(M.messageType) changed")
        let decoded = try HubCodec.decode(M.self, from: Data(text.utf8))
        #expect(decoded.payload == message)
        #expect(decoded.id == "fixture-1")
        #expect(decoded.auth == "token")
        #expect(decoded.v == HubProtocolVersion.current)
        #expect(decoded.type == M.messageType)
    }

    static let acceptedIds = [
        "0190b3c8-7f1e-7a2b-9c3d-4e5f60718293", "", "with/slash", "naïve", #"say "hi""#, #"back\slash"#, "tab\there", "del\u{7f}",
    ]

    @Test("a send's acceptance is written by hand exactly as the encoder writes it, or left to the encoder",
        arguments: NotificationState.allCases)
    func acceptedWrittenAsTheEncoderWrites(state: NotificationState) throws {
        let encoder = HubCodec.makeEncoder()
        for id in Self.acceptedIds {
            let accepted = SendAccepted(notificationId: id, state: state)
            let byEncoder = try encoder.encode(accepted)
            if let written = accepted.writtenJSON() {
                #expect(written == byEncoder, "\(id)")
                #expect(written.withUnsafeBytes(SendAccepted.readWritten) == accepted, "\(id)")
            } else {
                // Only what JSON would escape (or is not ASCII) goes to the encoder.
                #expect(id.utf8.contains { $0 < 0x20 || $0 >= 0x7f || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }, "'\(id)' left to the encoder")
            }
            // Either way, the envelope reads back.
            let envelope = Envelope(id: "r-1", auth: nil, payload: accepted)
            #expect(try HubCodec.decodeReply(SendAccepted.self, from: HubCodec.encode(envelope)) == envelope)
        }
    }

    @Test("only the exact written form of an acceptance is read without the decoder; the decoder reads every other")
    func acceptedReadOnlyInTheWrittenForm() throws {
        let others = [
            #"{ "notificationId":"a","state":"Enqueued"}"#, #"{"state":"Enqueued","notificationId":"a"}"#,
            #"{"notificationId":"a","state":"Enqueued","extra":1}"#, #"{"notificationId":"a\/b","state":"Enqueued"}"#,
            #"{"notificationId":"a","state":"Lost"}"#, #"{"notificationId":"a","state":"Enqueued""#, #"{"notificationId":"a","state":"Enqueued"}}"#,
            #"{"notificationId":"a"}"#, #"{"notificationId":"a","state":"Enqueued" }"#, #"{"notificationId":"a\"b","state":"Enqueued"}"#,
            #"{"notificationId":"\#u{1}","state":"Enqueued"}"#, "", #"{"notificationId":"ab","state":"}"#, #"{"notificationId":"ab","state":""}"#,
            #"{"notificationId":"","state":"}"#,
        ]
        for text in others {
            #expect(Data(text.utf8).withUnsafeBytes(SendAccepted.readWritten) == nil, "\(text)")
        }
        // Bytes the decoder accepts decode through it.
        let spaced = Data(#"{"v":1,"type":"notification.accepted","id":"r-2","payload":{ "state":"Completed", "notificationId":"a\/b"}}"#.utf8)
        #expect(try HubCodec.decodeReply(SendAccepted.self, from: spaced).payload == SendAccepted(notificationId: "a/b", state: .completed))
    }
}
