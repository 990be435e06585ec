import Foundation
@testable import HubProtocol
import Testing

@Suite("Decoding bad input")
struct DecodingErrorTests {
    func code(_ text: String) -> ErrorCode? {
        do {
            _ = try HubCodec.decode(InstallationGet.self, from: Data(text.utf8))
            return nil
        } catch {
            return error.code
        }
    }

    func message(_ text: String) -> String {
        do {
            _ = try HubCodec.decode(InstallationGet.self, from: Data(text.utf8))
            return ""
        } catch {
            return error.message
        }
    }

    @Test("bad envelopes get the right code", arguments: [
        ("", ErrorCode.emptyMessage),
        ("\u{1}\u{2}garbage", .malformedEnvelope),
        ("[1,2]", .malformedEnvelope),
        (#"{"type":"installation.get","id":"1","payload":{}}"#, .malformedEnvelope),
        (#"{"v":true,"type":"installation.get","id":"1","payload":{}}"#, .malformedEnvelope),
        (#"{"v":"1","type":"installation.get","id":"1","payload":{}}"#, .malformedEnvelope),
        (#"{"v":1,"id":"1","payload":{}}"#, .malformedEnvelope),
        (#"{"v":1,"type":"installation.get","payload":{}}"#, .malformedEnvelope),
        (#"{"v":1,"type":"installation.get","id":"1","auth":5,"payload":{}}"#, .malformedEnvelope),
        (#"{"v":2,"type":"installation.get","id":"1","payload":{"installationId":"a"}}"#, .unsupportedVersion),
        (#"{"v":1,"type":"installation.get","id":"1","extra":0,"payload":{"installationId":"a"}}"#, .unknownField),
        (#"{"v":1,"type":"installation.delete","id":"1","payload":{"installationId":"a"}}"#, .unknownType),
        (#"{"v":1,"type":"installation.get","id":"1","payload":{}}"#, .invalidPayload),
        (#"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":7}}"#, .invalidPayload),
        (#"{"v":1,"type":"installation.get","id":"1"}"#, .invalidPayload),
        (#"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":"a","color":"red"}}"#, .unknownField),
    ])
    func badEnvelope(text: String, expected: ErrorCode) {
        #expect(code(text) == expected)
    }

    @Test("messages say what to fix")
    func messages() {
        #expect(message(#"{"v":1,"type":"installation.get","id":"1","payload":{}}"#).contains("installationId"))
        #expect(message(#"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":"a","color":"red"}}"#)
            .contains("'color'"))
        #expect(message(#"{"v":9,"type":"installation.get","id":"1","payload":{}}"#).contains("version 9"))
    }

    @Test("an unknown field deep inside is named by its path")
    func nestedUnknownField() {
        let text = #"""
            {"v":1,"type":"installation.upsert","id":"1","payload":{"installation":{"installationId":"a",
            "platform":"linux","pushChannel":"c","tags":[],"templates":{"t":{"body":"{}","colour":"x"}}}}}
            """#
        do {
            _ = try HubCodec.decode(InstallationUpsert.self, from: Data(text.utf8))
            Issue.record("should fail")
        } catch {
            #expect(error.code == .unknownField)
            #expect(error.message.contains("installation.templates.t.colour"))
        }
    }

    @Test("a checked decode gives back the payload as encodeValue writes it, for storing as it is; nothing when the payload has no fields")
    func payloadJSON() throws {
        let send = SendNotification(format: .template, properties: ["messageParam": "a/b \"q\""], tagExpression: "World && !Sports")
        let data = HubCodec.encode(send, id: "1")
        let (envelope, payloadJSON) = try HubCodec.decodeChecked(SendNotification.self, from: data)
        #expect(envelope.payload == send)
        #expect(payloadJSON == HubCodec.encodeValue(send))
        let empty = try HubCodec.decodeChecked(HealthRequest.self, from: Data(#"{"v":1,"type":"health","id":"2","payload":{}}"#.utf8))
        #expect(empty.payloadJSON == nil)
        #expect(throws: HubError.self) {
            try HubCodec.decodeChecked(SendNotification.self, from: Data(#"{"v":1,"type":"notification.send","id":"3","payload":{"format":"native","bogus":1}}"#.utf8))
        }
    }

    @Test("a null optional field is not an unknown field")
    func nullOptional() throws {
        let text = #"{"v":1,"type":"installation.list","id":"1","auth":null,"payload":{"tag":null,"limit":5}}"#
        let envelope = try HubCodec.decode(InstallationList.self, from: Data(text.utf8))
        #expect(envelope.payload == InstallationList(tag: nil, limit: 5))
        #expect(envelope.auth == nil)
    }

    @Test("a bad date says which form to use")
    func badDate() {
        let text = #"{"v":1,"type":"user.post","id":"1","payload":{"userId":"u","appNotificationId":"a","expiresAt":"tomorrow"}}"#
        do {
            _ = try HubCodec.decode(PostUserNotification.self, from: Data(text.utf8))
            Issue.record("should fail")
        } catch {
            #expect(error.code == .invalidPayload)
            #expect(error.message.contains("ISO 8601"))
        }
    }

    @Test("an error reply decodes as a thrown HubError with its code")
    func errorReply() {
        let data = HubCodec.encodeError(HubError(.notFound, "no installation 'x'"), id: "7")
        #expect(throws: HubError(.notFound, "no installation 'x'")) {
            try HubCodec.decodeReply(InstallationReply.self, from: data)
        }
    }

    @Test("a reply may hold fields its type does not have (a newer service's), a request may not")
    func extraReplyFields() throws {
        let reply = #"{"v":1,"type":"ack","id":"1","payload":{"addedLater":true}}"#
        #expect(try HubCodec.decodeReply(Ack.self, from: Data(reply.utf8)).id == "1")
        #expect(throws: HubError(.unknownField, "'ack' has no field 'addedLater'")) {
            try HubCodec.decode(Ack.self, from: Data(reply.utf8))
        }
        let error = #"{"v":1,"type":"error","id":"2","payload":{"code":"not_found","message":"gone","hint":"x"}}"#
        #expect(throws: HubError(.notFound, "gone")) { try HubCodec.decodeReply(Ack.self, from: Data(error.utf8)) }
    }

    @Test("a stream body holds the notification whole, its id escaped; one too large holds its id alone")
    func streamBody() {
        let notification = AcceptedNotification(
            sequence: 7, notificationId: "id \"quoted\" \\ tab\t bell\u{7}", send: SendNotification(format: .native, body: "b"),
            enqueuedAt: Date(timeIntervalSince1970: 1_780_000_000.25), expiresAt: Date(timeIntervalSince1970: 1_780_000_060.5))
        let body = NotificationStream.body(notification)
        #expect(NotificationStream.notification(in: body, sequence: 7) == notification)
        #expect(NotificationStream.notification(in: body, sequence: 8) == nil, "under another sequence it is not this notification")
        var large = notification
        large.send.body = String(repeating: "x", count: NotificationStream.inlineLimit)
        #expect(NotificationStream.body(large) == Data(notification.notificationId.utf8))
        #expect(NotificationStream.notification(in: NotificationStream.body(large), sequence: 7) == nil)
    }

    @Test("a stream body in the form the publish service writes is read by a scan as the decoder reads it whole; any other form by the decoder")
    func streamBodyScanned() throws {
        let whole = HubCodec.makeDecoder()
        let send = try #require(Samples.all.compactMap { $0 as? SendNotification }.first)
        for (index, id) in ["0193a1b2-7c3d-7e4f-8a5b-6c7d8e9f0a1b", "id \"quoted\" \\ tab\t", "é ünïcode", ""].enumerated() {
            let notification = AcceptedNotification(
                sequence: UInt64(index + 1) * 1_000_003, notificationId: id, send: send, enqueuedAt: Samples.instant, expiresAt: Samples.later)
            let body = NotificationStream.body(notification)
            #expect(NotificationStream.notification(in: body, sequence: notification.sequence) == notification, "\(id)")
            // Read by the scan, unless the id was written with escapes.
            #expect((NotificationStream.scanned(body) == notification) == (index != 1), "\(id)")
            #expect(try whole.decode(AcceptedNotification.self, from: body) == notification)
        }
        let written = String(decoding: NotificationStream.body(AcceptedNotification(
            sequence: 42, notificationId: "n", send: SendNotification(format: .native, body: "b"), enqueuedAt: Samples.instant,
            expiresAt: Samples.later)), as: UTF8.self)
        #expect(written.contains(#","sequence":42}"#) && written.contains(#""notificationId":"n""#) && written.contains(#".250Z""#))
        for (old, new) in [
            (#","sequence":42"#, #","sequence":042"#), (#","sequence":42"#, #","sequence":42.0"#), (#","sequence":42"#, #","sequence":4.2e1"#),
            (#","sequence":42"#, #","sequence":42,"extra":1"#), (#","sequence":42"#, #","sequence":42,"sequence":42"#),
            (#","sequence":42"#, ""), (#""notificationId":"n""#, #""notificationId":"\u006e""#), (#""notificationId":"n""#, #""notificationId":7"#),
            (#"{"enqueuedAt""#, #"{ "enqueuedAt""#), (#""send":{"#, #""send":{"extra":1,"#), (#".250Z""#, #"Z""#), (#".250Z""#, #".25Z""#),
            (#""send":{"#, #""send":[{"#),
        ] {
            let data = Data(written.replacingOccurrences(of: old, with: new).utf8)
            let expected = (try? whole.decode(AcceptedNotification.self, from: data)).flatMap { $0.sequence == 42 ? $0 : nil }
            #expect(NotificationStream.notification(in: data, sequence: 42) == expected, "\(new)")
        }
    }

    @Test("the header is readable before the payload type is known")
    func header() throws {
        let data = HubCodec.encode(HealthRequest(), id: "abc", auth: "t")
        #expect(try HubCodec.header(of: data) == EnvelopeHeader(type: "health", id: "abc", auth: "t"))
    }

    @Test("wire dates are UTC with milliseconds and parse both ways")
    func dates() {
        let date = Date(timeIntervalSince1970: 1_780_000_000.25)
        #expect(WireDate.format(date) == "2026-05-28T20:26:40.250Z")
        #expect(WireDate.parse("2026-05-28T20:26:40.250Z") == date)
        #expect(WireDate.parse("2026-05-28T20:26:40Z") == Date(timeIntervalSince1970: 1_780_000_000))
        #expect(WireDate.parse("yesterday") == nil)
    }

    @Test("a wire date read back is written the same, to the millisecond, and a date is written to its nearest millisecond")
    func datesRoundTrip() {
        for step in 0..<2_000 {
            let text = WireDate.format(Date(timeIntervalSince1970: 1_780_000_000 + Double(step) * 0.0137))
            #expect(WireDate.parse(text).map(WireDate.format) == text)
        }
        #expect(WireDate.format(Date(timeIntervalSince1970: 1_780_000_000.9996)) == "2026-05-28T20:26:41.000Z")
        #expect(WireDate.format(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500Z")
        #expect(WireDate.format(Date(timeIntervalSince1970: 253_402_300_799.999)) == "9999-12-31T23:59:59.999Z")
    }

    @Test("a date from 1970 through 9999 is written from its digits exactly as Foundation's style writes it; any other by that style")
    func datesWrittenAsFoundationWrites() throws {
        let plain = Date.ISO8601FormatStyle()
        func foundation(_ seconds: Int64, _ milliseconds: Int) -> String {
            String(Date(timeIntervalSince1970: Double(seconds)).formatted(plain).dropLast()) + "." + String(format: "%03d", milliseconds) + "Z"
        }
        var generator = SystemRandomNumberGenerator()
        // Year, century and leap-day edges, then seconds anywhere in the range.
        var seconds: [Int64] = [0, 59, 86_399, 86_400, 951_782_399, 951_782_400, 951_868_800, 1_709_164_800, 4_107_542_399, 4_107_542_400,
                                4_102_444_800, 253_402_300_799, 253_402_214_400]
        for _ in 0..<5_000 { seconds.append(Int64.random(in: 0..<253_402_300_800, using: &generator)) }
        for second in seconds {
            let milliseconds = Int.random(in: 0..<1_000, using: &generator)
            #expect(WireDate.written(seconds: second, milliseconds: milliseconds) == foundation(second, milliseconds), "\(second)")
        }
        for (second, milliseconds) in [(Int64(-1), 0), (253_402_300_800, 0), (0, 1_000), (0, -1)] {
            #expect(WireDate.written(seconds: second, milliseconds: milliseconds) == nil)
        }
        #expect(WireDate.format(Date(timeIntervalSince1970: 253_402_300_800.5)) == (Date(timeIntervalSince1970: 253_402_300_800.5)).formatted(WireDate.withFraction))
    }

    @Test("a date in the form the codec writes is read from its digits as Foundation's parser reads it; any other form is Foundation's")
    func datesReadAsFoundationReads() throws {
        let foundation = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let date = Date(timeIntervalSince1970: Double(Int64.random(in: 0..<253_402_300_800, using: &generator)) + Double(Int.random(in: 0..<1_000, using: &generator)) / 1_000)
            let text = WireDate.format(date)
            let read = try #require(WireDate.parse(text), "\(text)")
            let expected = try foundation.parse(text)
            // Foundation's own sum is a hair off near 2001 (its reference date); never by a millisecond's worth.
            #expect(abs(read.timeIntervalSinceReferenceDate - expected.timeIntervalSinceReferenceDate) < 1e-6, "\(text)")
            #expect(WireDate.format(read) == text)
            let whole = String(text.dropLast(5)) + "Z"
            #expect(WireDate.parse(whole) == (try Date.ISO8601FormatStyle().parse(whole)), "\(whole)")
        }
        // Leap days, and what the digits alone cannot say, read as Foundation reads them.
        for text in [
            "2028-02-29T12:00:00.500Z", "2026-02-29T00:00:00Z", "2026-02-30T00:00:00Z", "2026-04-31T00:00:00.000Z", "2026-05-28T20:26:60Z",
            "2026-05-28T24:00:00Z", "2026-05-28T20:26:40.1Z", "2026-05-28T20:26:40.123456Z", "2026-05-28T20:26:40+01:00", "1969-12-31T23:59:59.500Z",
            "0000-01-01T00:00:00Z", "2026-13-01T00:00:00Z", "2026-05-28T20:26:4x.000Z", "2026-05-28 20:26:40Z", "2026-05-28t20:26:40z",
        ] {
            #expect(WireDate.parse(text) == ((try? foundation.parse(text)) ?? (try? Date.ISO8601FormatStyle().parse(text))), "\(text)")
        }
        #expect(WireDate.parse("2028-02-29T12:00:00.500Z") == Date(timeIntervalSince1970: 1_835_438_400.5))
    }

    @Test("error codes are stable strings")
    func codes() {
        #expect(ErrorCode.allCases.count == Set(ErrorCode.allCases.map(\.rawValue)).count)
        #expect(ErrorCode.malformedFrames.rawValue == "malformed_frames")
        #expect(ErrorCode.unknownType.rawValue == "unknown_type")
    }

    @Test("a payload without an envelope decodes as strictly, and encodes back to the same fields")
    func payloadOnly() throws {
        let get = try HubCodec.decodePayload(InstallationGet.self, from: Data(#"{"installationId":"a"}"#.utf8))
        #expect(get == InstallationGet(installationId: "a"))
        #expect(String(decoding: HubCodec.encodePayload(get), as: UTF8.self) == #"{"installationId":"a"}"#)
        #expect(throws: HubError(.unknownField, "'installation.get' has no field 'colour'")) {
            try HubCodec.decodePayload(InstallationGet.self, from: Data(#"{"installationId":"a","colour":"red"}"#.utf8))
        }
        #expect(throws: HubError.self) { try HubCodec.decodePayload(InstallationGet.self, from: Data("[]".utf8)) }
    }

    func changesError(_ payload: String) -> HubError? {
        do {
            _ = try HubCodec.decode(UserChangesRequest.self, from: Data(#"{"v":1,"type":"user.changes","id":"1","payload":\#(payload)}"#.utf8))
            return nil
        } catch {
            return error
        }
    }

    @Test("a number that does not fit its field is named, with what it must be", arguments: [
        (#"{"cursor":-1}"#, "'payload.cursor' is -1 but must not be negative"),
        (#"{"cursor":1.5}"#, "'payload.cursor' is 1.5 but must be a whole number"),
        (#"{"cursor":3,"limit":9223372036854775808}"#, "'payload.limit' is 9223372036854775808 but is too large"),
    ])
    func numbersNamed(payload: String, expected: String) {
        let error = changesError(payload)
        #expect(error?.code == .invalidPayload)
        #expect(error?.message.contains(expected) == true, "\(error?.message ?? "no error")")
        #expect(error?.message.contains("not valid JSON") == false)
    }

    @Test("the correlation id of an envelope is found without parsing the rest, wherever it is", arguments: [
        (#"{"v":1,"id":"abc","type":"x","payload":{}}"#, "abc"),
        (#"{"payload":{"id":"inner","data":"\"}{[]"},"auth":null,"id":"outer","v":1}"#, "outer"),
        (#"  {"v":1, "type":"x", "payload":[1,2,{"a":[]}], "id" : "spaced"}"#, "spaced"),
        (#"{"v":1,"payload":{"x":1}}"#, nil),
        (#"not json"#, nil),
        (#"{"id":5}"#, nil),
        (#"{"id":"one","v":1,"id":"two"}"#, nil),
        (#"{"id":"esc\"aped"}"#, nil),
        (#"{"id":"cut","payload":{"#, nil),
    ])
    func scanID(text: String, expected: String?) {
        #expect(HubCodec.scanID(Data(text.utf8)) == expected)
    }

    @Test("a payload that is not an object is refused, also for a type without fields", arguments: ["null", "1", #""x""#, "[1]", "true"])
    func payloadMustBeAnObject(payload: String) {
        do {
            _ = try HubCodec.decode(HealthRequest.self, from: Data(#"{"v":1,"type":"health","id":"x","payload":\#(payload)}"#.utf8))
            Issue.record("accepted payload \(payload)")
        } catch {
            #expect(error.code == .invalidPayload)
            #expect(error.message.contains("JSON object"))
        }
    }

    @Test("a request's payload in the codec's own bytes is checked without a second parse; one with a field more is refused still")
    func payloadBytesAsEncoded() throws {
        let send = SendNotification(format: .template, properties: ["b": "2", "a": "1"], tagExpression: "Sports")
        let data = HubCodec.encode(send, id: "x")
        let (envelope, payloadJSON) = try HubCodec.decodeChecked(SendNotification.self, from: data)
        #expect(envelope.payload == send)
        #expect(payloadJSON == HubCodec.encodeValue(send))
        // The same bytes with one more field, first in the payload and then last.
        let text = String(decoding: data, as: UTF8.self)
        for extra in [text.replacingOccurrences(of: #""payload":{"#, with: #""payload":{"aaa":1,"#),
                      text.replacingOccurrences(of: #""tagExpression":"Sports""#, with: #""tagExpression":"Sports","zzz":1"#)] {
            #expect(extra != text)
            do {
                _ = try HubCodec.decodeChecked(SendNotification.self, from: Data(extra.utf8))
                Issue.record("accepted \(extra)")
            } catch {
                #expect(error.code == .unknownField, "\(error)")
            }
        }
    }

    @Test("a top-level member is found by a scan of the bytes, once, or not at all", arguments: [
        (#"{"v":1,"payload":{"a":[1,{"payload":2}]},"id":"x"}"#, "payload", #"{"a":[1,{"payload":2}]}"#),
        (#" { "payload" : "p" } "#, "payload", #""p""#),
        (#"{"v":1,"n":-2.5e3}"#, "n", "-2.5e3"),
        (#"{"payload":{},"payload":{"a":1}}"#, "payload", nil),
        (#"{"payload":{"#, "payload", nil),
        (#"[{"payload":1}]"#, "payload", nil),
        (#"{"v":1}"#, "payload", nil),
        (#"{"payload":{},"p\u0061yload":{"a":1}}"#, "payload", nil),
    ] as [(String, String, String?)])
    func scanMember(text: String, key: String, expected: String?) {
        let data = Data(text.utf8)
        let found = HubCodec.scanMember(data, key).map { String(decoding: data[$0], as: UTF8.self) }
        #expect(found == expected)
    }

    @Test("a reply of the expected type decodes in one pass only in a version this build reads, with an object for its payload")
    func replyChecks() throws {
        let good = #"{"v":1,"type":"notification.accepted","id":"r","payload":{"notificationId":"n1","state":"Enqueued"}}"#
        #expect(try HubCodec.decodeReply(SendAccepted.self, from: Data(good.utf8)).payload.notificationId == "n1")
        do {
            _ = try HubCodec.decodeReply(SendAccepted.self, from: Data(good.replacingOccurrences(of: #""v":1"#, with: #""v":2"#).utf8))
            Issue.record("a reply in version 2 was taken")
        } catch {
            #expect(error.code == .unsupportedVersion)
        }
        do {
            _ = try HubCodec.decodeReply(Ack.self, from: Data(#"{"v":1,"type":"ack","id":"r","payload":[]}"#.utf8))
            Issue.record("a payload that is not an object was taken")
        } catch {
            #expect(error.code == .invalidPayload)
        }
    }

    @Test("an envelope's header is read by a scan only in the form the codec writes; anything else is left to the parse", arguments: [
        #"{"v":1,"type":"installation.get","id":"1","payload":{},"extra":1}"#,
        #"{"v":1,"type":"installation.get","id":"1","id":"2","payload":{}}"#,
        #"{"v":1,"type":"installation.get","i\u0064":"1","payload":{}}"#,
        #"{"v":1,"type":"installation.get","id":"a\"b","payload":{}}"#,
        #"{"v":1.0,"type":"installation.get","id":"1","payload":{}}"#,
        #"{"v":"1","type":"installation.get","id":"1","payload":{}}"#,
        #"{"v":2,"type":"installation.get","id":"1","payload":{}}"#,
        #"{"v":1,"type":"","id":"1","payload":{}}"#,
        #"{"v":1,"type":"installation.get","id":1,"payload":{}}"#,
        #"{"v":1,"type":"installation.get","id":"1","auth":5,"payload":{}}"#,
        #"{"v":1,"type":"installation.get","id":"1","payload":[]}"#,
        #"{"v":1,"type":"installation.get","id":"1","payload":{}}x"#,
        "{\"v\":1,\"type\":\"installation.get\",\"id\":\"a\u{1}b\",\"payload\":{}}",
        #"{"v":1,"type":"installation.get","id":"é","payload":{}}"#,
        #"{"v":1,"id":"1","payload":{}}"#,
        #"{"v":01,"type":"installation.get","id":"1","payload":{}}"#,
    ])
    func scanHeaderLeavesTheRest(text: String) {
        #expect(HubCodec.scanHeader(Data(text.utf8)) == nil)
    }

    @Test("a value nested near the depth limit is taken or refused alike, whether the header was scanned or parsed")
    func depthAlikeBothWays() throws {
        var outcomes: Set<String> = []
        for depth in 55...70 {
            let value = String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth)
            let text = #"{"id":"1","payload":{"installationId":"i","operations":[{"op":"add","path":"/tags","value":"# + value
                + #"}]},"type":"installation.patch","v":1}"#
            let data = Data(text.utf8)
            #expect(HubCodec.scanHeader(data) != nil)
            func outcome(_ parsed: HubCodec.Parsed?) -> String {
                do {
                    _ = try HubCodec.decode(InstallationPatch.self, from: data, parsed: parsed)
                    return "taken"
                } catch {
                    return error.code.rawValue
                }
            }
            let scanned = outcome(nil)
            #expect(scanned == outcome(try HubCodec.parse(data)), "nested \(depth) deep")
            outcomes.insert(scanned)
        }
        #expect(outcomes == ["taken", ErrorCode.invalidPayload.rawValue], "the limit lies within the depths tried")
        // A member nested deeper than a scan takes is left to the parse, whatever the payload's type reads.
        // The payload's object is one level, its member's arrays the rest.
        let deep = String(repeating: "[", count: HubCodec.maxScanDepth) + String(repeating: "]", count: HubCodec.maxScanDepth)
        #expect(HubCodec.scanHeader(Data((#"{"id":"1","payload":{"x":"# + deep + #"},"type":"health","v":1}"#).utf8)) == nil)
        let shallow = String(repeating: "[", count: HubCodec.maxScanDepth - 1) + String(repeating: "]", count: HubCodec.maxScanDepth - 1)
        #expect(HubCodec.scanHeader(Data((#"{"id":"1","payload":{"x":"# + shallow + #"},"type":"health","v":1}"#).utf8)) != nil)
    }

    @Test("a scanned header is the parsed one, with the payload's place")
    func scanHeaderReadsTheCodecsOwn() throws {
        let send = SendNotification(format: .template, properties: ["a": "1"], tagExpression: "Sports")
        for data in [HubCodec.encode(send, id: "x-1", auth: "SharedAccessSignature sr=a&sig=b"), HubCodec.encode(send, id: "")] {
            let scanned = try #require(HubCodec.scanHeader(data))
            #expect(scanned.header == (try HubCodec.parse(data)).header)
            let spaced = Data(" \n\(String(decoding: data, as: UTF8.self)) \n".utf8)
            #expect(HubCodec.scanHeader(spaced)?.header == scanned.header)
        }
        let nullAuth = Data(#"{"auth":null,"id":"7","payload":{},"type":"health","v":1}"#.utf8)
        #expect(HubCodec.scanHeader(nullAuth)?.header == EnvelopeHeader(type: "health", id: "7"))
    }

    /// Each input decoded from a scan and from a parse: the same envelope, or the same error.
    @Test("decoding from a scanned header answers as decoding from the parsed tree", arguments: [
        #"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":"i"}}"#,
        #"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":"i","extra":1}}"#,
        #"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":"i","installationId":"j"}}"#,
        #"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":7}}"#,
        #"{"v":1,"type":"installation.get","id":"1","payload":{}}"#,
        #"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":"i"},"x":0}"#,
        #"{"v":1,"type":"installation.get","id":"1"}"#,
        #"{"v":1,"type":"health","id":"1","payload":{"installationId":"i"}}"#,
        #"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":"i"}} ]"#,
        #"{"v":1,"type":"installation.get","id":"1","payload":{"installationId":"i\u0041"}}"#,
    ])
    func scannedAsParsed(text: String) {
        let data = Data(text.utf8)
        func outcome(_ parsed: HubCodec.Parsed?) -> String {
            do {
                let (envelope, json) = try HubCodec.decodeChecked(InstallationGet.self, from: data, parsed: parsed)
                return "\(envelope) \(json.map { String(decoding: $0, as: UTF8.self) } ?? "-")"
            } catch {
                return error.code.rawValue
            }
        }
        let parsed = try? HubCodec.parse(data)
        #expect(outcome(HubCodec.scanHeader(data)) == outcome(parsed), "\(text)")
        #expect(outcome(nil) == outcome(parsed), "\(text)")
    }
}
