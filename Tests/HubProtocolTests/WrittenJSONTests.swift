import Foundation
@testable import HubProtocol
import Testing

/// A send written and read without the JSON coders must be byte for byte what the encoder writes,
/// and read only bytes the decoder reads to the same send.
@Suite("Sends written and read without the coders")
struct WrittenJSONTests {
    static let plainTexts = ["", "a", "World", "tag && other || (x)", "with/slash", "sp ace", "{$(m)}", "0", "~`!@#$%^&*()_+=-[]{}|;:',.<>?"]
    static let otherTexts = [#"say "hi""#, #"back\slash"#, "tab\there", "naïve", "del\u{7f}", "bell\u{7}"]

    static func randomSend(_ generator: inout some RandomNumberGenerator, texts: [String]) -> SendNotification {
        func text() -> String? { Bool.random(using: &generator) ? texts.randomElement(using: &generator)! : nil }
        func map() -> [String: String]? {
            guard Bool.random(using: &generator) else { return nil }
            var map: [String: String] = [:]
            for _ in 0..<Int.random(in: 0...5, using: &generator) {
                map[(texts.randomElement(using: &generator)! + String(Int.random(in: 0...20, using: &generator)))] = texts.randomElement(using: &generator)!
            }
            return map
        }
        var send = SendNotification(
            idempotencyKey: text(), format: Bool.random(using: &generator) ? .template : .native, body: text(), properties: map(),
            tagExpression: text(), installationId: text(), userId: text(),
            timeToLive: Bool.random(using: &generator) ? [0, 1, -1, 60, Int.max, Int.min, 2_419_200].randomElement(using: &generator)! : nil,
            platform: Bool.random(using: &generator) ? Platform.allCases.randomElement(using: &generator)! : nil, headers: map())
        if Int.random(in: 0..<10, using: &generator) == 0 { send.test = true }
        if Int.random(in: 0..<10, using: &generator) == 0 { send.scheduledAt = Date(timeIntervalSince1970: 1_780_000_000.25) }
        if Int.random(in: 0..<10, using: &generator) == 0 { send.installationIds = ["a", "b"] }
        send.hub = text()
        return send
    }

    @Test("a plain send is written exactly as the encoder writes it and read back; any other is left to the encoder")
    func writtenAsTheEncoderWrites() throws {
        let encoder = HubCodec.makeEncoder()
        var generator = SystemRandomNumberGenerator()
        var written = 0
        for round in 0..<4_000 {
            let send = Self.randomSend(&generator, texts: round % 4 == 0 ? Self.plainTexts + Self.otherTexts : Self.plainTexts)
            let byEncoder = try encoder.encode(send)
            let plainStrings = [send.body, send.idempotencyKey, send.installationId, send.tagExpression, send.userId, send.hub].compactMap { $0 }
                + (send.properties.map { Array($0.keys) + Array($0.values) } ?? []) + (send.headers.map { Array($0.keys) + Array($0.values) } ?? [])
            let writable = send.test == nil && send.scheduledAt == nil && send.installationIds == nil && send.rich == nil
                && plainStrings.allSatisfy(HubCodec.isPlain)
            guard let bytes = send.writtenJSON() else {
                #expect(!writable, "\(String(decoding: byEncoder, as: UTF8.self)) was left to the encoder")
                continue
            }
            written += 1
            #expect(writable)
            #expect(bytes == byEncoder, "\(String(decoding: bytes, as: UTF8.self)) against \(String(decoding: byEncoder, as: UTF8.self))")
            #expect(bytes.withUnsafeBytes(SendNotification.readWritten) == send)
        }
        #expect(written > 1_000)
    }

    @Test("bytes not in the written form are left to the decoder")
    func otherFormsLeftToTheDecoder() {
        let others = [
            #"{"format":"template" }"#, #"{ "format":"template"}"#, #"{"tagExpression":"a","format":"template"}"#,
            #"{"format":"template","format":"template"}"#, #"{"format":"template","timeToLive":060}"#, #"{"format":"template","timeToLive":-0}"#,
            #"{"format":"template","timeToLive":1.0}"#, #"{"format":"template","timeToLive":99999999999999999999}"#,
            #"{"format":"template","tagExpression":"a\/b"}"#, #"{"format":"template","extra":1}"#, #"{"format":"template","body":null}"#,
            #"{"format":"template"}x"#, #"{"format":"template""#, #"{"body":"b"}"#, #"{"format":"other"}"#, #"{"format":"native","platform":"Apns"}"#,
            #"{"format":"template","properties":{"b":"1","a":"2"}}"#, #"{"format":"template","properties":{"a":"1","a":"2"}}"#,
            #"{"format":"template","properties":{"a":1}}"#, #"{"format":"template","properties":{"a":"1",}}"#, #"{"format":"template","properties":[]}"#,
            #"{"format":"template","test":true}"#, #"{"format":"template","scheduledAt":"2026-05-28T20:26:40.250Z"}"#, "{}", "", "{",
            #"{"format":"template",}"#, #"{,"format":"template"}"#,
        ]
        for text in others {
            #expect(Data(text.utf8).withUnsafeBytes(SendNotification.readWritten) == nil, "\(text)")
        }
    }

    @Test("whatever is read without the decoder, the decoder reads to the same send")
    func readOnlyWhatTheDecoderReadsAlike() throws {
        var generator = SystemRandomNumberGenerator()
        let decoder = HubCodec.makeDecoder()
        let alphabet = Array(#"{}[]",:"0123456789-abz \/"#.utf8)
        var read = 0
        for _ in 0..<20_000 {
            var written: Data?
            while written == nil { written = Self.randomSend(&generator, texts: Self.plainTexts).writtenJSON() }
            var bytes = [UInt8](written!)
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let at = Int.random(in: 0..<max(bytes.count, 1), using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0 where !bytes.isEmpty: bytes[at] = alphabet.randomElement(using: &generator)!
                case 1 where !bytes.isEmpty: bytes.remove(at: at)
                default: bytes.insert(alphabet.randomElement(using: &generator)!, at: min(at, bytes.count))
                }
            }
            guard let send = bytes.withUnsafeBytes(SendNotification.readWritten) else { continue }
            read += 1
            #expect(try decoder.decode(SendNotification.self, from: Data(bytes)) == send, "\(String(decoding: bytes, as: UTF8.self))")
        }
        #expect(read > 0)
    }

    @Test("a send request in the written form is decoded, checked, and kept as the encoder writes it")
    func requestsDecodeAsBefore() throws {
        let send = SendNotification(format: .template, properties: ["messageParam": "bus 1 2"], tagExpression: "HttpBench")
        let data = HubCodec.encode(send, id: "r-1", auth: "token")
        let (envelope, payloadJSON) = try HubCodec.decodeChecked(SendNotification.self, from: data)
        #expect(envelope.payload == send)
        #expect(payloadJSON == (try HubCodec.makeEncoder().encode(send)))
        // A member the type lacks is still refused, named.
        let extra = Data(#"{"auth":"token","id":"r-2","payload":{"format":"template","zzz":1},"type":"notification.send","v":1}"#.utf8)
        #expect(throws: HubError.self) { try HubCodec.decodeChecked(SendNotification.self, from: extra) }
        do {
            _ = try HubCodec.decodeChecked(SendNotification.self, from: extra)
        } catch {
            #expect(error.code == .unknownField)
            #expect(error.message.contains("zzz"))
        }
    }

    @Test("a map of plain strings as the encoder writes it is read without the decoder; whatever is read, the decoder reads alike")
    func stringMaps() throws {
        var generator = SystemRandomNumberGenerator()
        let encoder = HubCodec.makeEncoder(), decoder = HubCodec.makeDecoder()
        let alphabet = Array(#"{}[]",:"0123456789-abz \/"#.utf8)
        var mutatedRead = 0
        for _ in 0..<5_000 {
            var map: [String: String] = [:]
            for _ in 0..<Int.random(in: 0...4, using: &generator) {
                map[Self.plainTexts.randomElement(using: &generator)! + String(Int.random(in: 0...9, using: &generator))] = Self.plainTexts.randomElement(using: &generator)!
            }
            let written = try encoder.encode(map)
            #expect(WrittenJSON.stringMap(written) == map, "\(String(decoding: written, as: UTF8.self))")
            var bytes = [UInt8](written)
            let at = Int.random(in: 0..<bytes.count, using: &generator)
            if Bool.random(using: &generator) { bytes[at] = alphabet.randomElement(using: &generator)! } else { bytes.insert(alphabet.randomElement(using: &generator)!, at: at) }
            guard let read = WrittenJSON.stringMap(Data(bytes)) else { continue }
            mutatedRead += 1
            #expect(try decoder.decode([String: String].self, from: Data(bytes)) == read, "\(String(decoding: bytes, as: UTF8.self))")
        }
        #expect(mutatedRead > 0)
        for text in [#"{"b":"1","a":"2"}"#, #"{"a":"1","a":"2"}"#, #"{ "a":"1"}"#, #"{"a":"1"} "#, #"{"a":1}"#, #"{"a":"\u0041"}"#, "[]", ""] {
            #expect(WrittenJSON.stringMap(Data(text.utf8)) == nil, "\(text)")
        }
    }
}

/// A user's changes with each notification kept as the bytes the encoder wrote for it (as the sync
/// store keeps them), put into the reply as they are.
@Suite("User changes written with their stored notifications")
struct UserChangesWrittenTests {
    static let texts = ["", "a", "Breaking", #"say "hi""#, #"back\slash"#, "tab\there", "naïve ünïcödé", "emoji 🎉", "with/slash", "line\nbreak"]

    static func randomNotification(_ generator: inout some RandomNumberGenerator, id: String) -> UserNotification {
        func text() -> String? { Bool.random(using: &generator) ? texts.randomElement(using: &generator)! : nil }
        // Some on whole milliseconds, some between them (written to the nearest one).
        let seconds = Double(Int.random(in: 1_700_000_000...1_900_000_000, using: &generator))
            + (Bool.random(using: &generator) ? [0, 0.25, 0.5].randomElement(using: &generator)! : Double.random(in: 0..<1, using: &generator))
        return UserNotification(
            id: id, appNotificationId: texts.randomElement(using: &generator)! + "-app", userId: texts.randomElement(using: &generator)!,
            visual: Bool.random(using: &generator) ? VisualContent(title: text() ?? "t", body: text() ?? "b") : nil, raw: text(),
            priority: ["normal", "high", "low"].randomElement(using: &generator)!, group: text(),
            expiresAt: Date(timeIntervalSince1970: seconds + 86_400), readState: Bool.random(using: &generator) ? .read : .unread,
            userActionState: [.noInteraction, .dismissed].randomElement(using: &generator)!,
            createdAt: Date(timeIntervalSince1970: seconds), modifiedAt: Date(timeIntervalSince1970: seconds + 1))
    }

    /// A random notification as a reader has it (its dates to the millisecond, as written), and
    /// the bytes the encoder wrote for it from its dates as they were made.
    static func sample(_ generator: inout some RandomNumberGenerator, id: String) throws -> (notification: UserNotification, written: Data) {
        let written = try HubCodec.makeEncoder().encode(randomNotification(&generator, id: id))
        return (try HubCodec.decodeValue(UserNotification.self, from: written), written)
    }

    @Test("written as the encoder writes the same changes held as values, and read back to equal values")
    func writtenAsTheEncoderWrites() throws {
        let encoder = HubCodec.makeEncoder()
        var generator = SystemRandomNumberGenerator()
        for round in 0..<500 {
            var asValues: [UserNotificationChange] = []
            var asStored: [UserNotificationChange] = []
            for index in 0..<Int.random(in: 0...6, using: &generator) {
                // Now and then an id JSON escapes, written by the encoder inside the reply.
                let id = Int.random(in: 0..<8, using: &generator) == 0 ? Self.texts.randomElement(using: &generator)! + "\(index)" : "n-\(round)-\(index)"
                let sequence = UInt64.random(in: 0...UInt64.max, using: &generator)
                switch Int.random(in: 0..<4, using: &generator) {
                case 0:
                    asValues.append(UserNotificationChange(kind: .deleted, sequence: sequence, id: id))
                    asStored.append(asValues.last!)
                case let choice:
                    let kind: UserNotificationChange.Kind = choice == 1 ? .created : .updated
                    let (notification, bytes) = try Self.sample(&generator, id: id)
                    asValues.append(UserNotificationChange(kind: kind, sequence: sequence, id: id, notification: notification))
                    // Some held as values beside the stored ones: both are written.
                    asStored.append(choice == 3 ? asValues.last! : try UserNotificationChange(kind: kind, sequence: sequence, id: id, written: bytes))
                }
            }
            let values = UserChanges(changes: asValues, cursor: UInt64.random(in: 0...UInt64.max, using: &generator), hasMore: Bool.random(using: &generator))
            let stored = UserChanges(changes: asStored, cursor: values.cursor, hasMore: values.hasMore)
            let byEncoder = try encoder.encode(values)
            let written = try #require(stored.writtenJSON())
            #expect(written == byEncoder, "\(String(decoding: written, as: UTF8.self)) against \(String(decoding: byEncoder, as: UTF8.self))")
            // The encoder, given the stored form, writes the same; values and stored forms are equal.
            #expect(try encoder.encode(stored) == byEncoder)
            #expect(stored == values)
            #expect(stored.changes.map(\.notification) == values.changes.map(\.notification))
            // Through an envelope and back, as an agent reads the reply, whatever the correlation id.
            let id = round % 5 == 0 ? "r \"\(round)\" ü" : "r-\(round)"
            let envelope = HubCodec.encode(stored, id: id)
            #expect(envelope == (try encoder.encode(Envelope(id: id, payload: values))))
            #expect(try HubCodec.decodeReply(UserChanges.self, from: envelope).payload == values)
        }
    }

    @Test("an id JSON escapes is written as the encoder escapes it; the encoder, given the stored form, writes it alike")
    func escapedId() throws {
        let encoder = HubCodec.makeEncoder()
        var generator = SystemRandomNumberGenerator()
        let (notification, bytes) = try Self.sample(&generator, id: #"odd "id""#)
        let stored = UserChanges(
            changes: [try UserNotificationChange(kind: .created, sequence: 7, id: #"odd "id""#, written: bytes)],
            cursor: 7, hasMore: false)
        let values = UserChanges(changes: [UserNotificationChange(kind: .created, sequence: 7, id: #"odd "id""#, notification: notification)], cursor: 7, hasMore: false)
        #expect(try stored.writtenJSON() == encoder.encode(values))
        #expect(try encoder.encode(stored) == encoder.encode(values))
        #expect(try HubCodec.decodeReply(UserChanges.self, from: HubCodec.encode(stored, id: "r")).payload == values)
    }

    @Test("stored bytes that are not a JSON object are refused, named; an object that is no notification gives none; a change set to one holds it as a value")
    func storageForms() throws {
        var generator = SystemRandomNumberGenerator()
        let notification = Self.randomNotification(&generator, id: "n")
        for damaged in ["", "not json", #"{"id":"#, "[1]", #""text""#, #"{"a":1} x"#] {
            do {
                _ = try UserNotificationChange(kind: .updated, sequence: 9, id: "n-9", written: Data(damaged.utf8))
                Issue.record("\(damaged) was taken")
            } catch {
                #expect(error.code == .internal && error.message.contains("n-9"))
            }
        }
        var change = try UserNotificationChange(kind: .updated, sequence: 1, id: "n", written: Data(#"{"other":1}"#.utf8))
        #expect(change.notification == nil)
        change.notification = notification
        #expect(change.notification == notification)
        change.notification = nil
        #expect(change == UserNotificationChange(kind: .updated, sequence: 1, id: "n"))
    }
}

/// An envelope's header strings that JSON escapes are written by the encoder, around any payload.
@Suite("Envelopes written around their payload")
struct WriteAroundTests {
    @Test("ids, auth and payloads the encoder escapes come out as the encoder writes the whole envelope")
    func escapedHeaders() throws {
        let encoder = HubCodec.makeEncoder()
        let texts = ["r-1", #"say "hi""#, #"back\slash"#, "tab\there", "naïve", "🎉", "with/slash", "", "del\u{7f}"]
        for id in texts {
            for auth in [nil] + texts {
                for accepted in [SendAccepted(notificationId: "plain", state: .enqueued), SendAccepted(notificationId: #"n "q""#, state: .scheduled)] {
                    let envelope = Envelope(id: id, auth: auth, payload: accepted)
                    let written = try HubCodec.writeAround(envelope)
                    #expect(written == (try encoder.encode(envelope)), "\(String(decoding: written, as: UTF8.self))")
                    #expect(try HubCodec.decodeReply(SendAccepted.self, from: written).payload == accepted)
                }
            }
        }
    }
}
