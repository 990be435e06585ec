import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Turns messages into envelope bytes and back. Decoding is strict: a malformed envelope, an
/// unsupported version, a missing field or a field the type does not have is a `HubError` that
/// names the problem, never a crash.
public enum HubCodec {
    static let envelopeKeys: Set<String> = ["v", "type", "id", "auth", "payload"]
    static let encoder = makeEncoder()
    static let decoder = makeDecoder()
    /// Decodes a payload alone, from its own bytes: what it holds sits one level deeper in the
    /// envelope, and `JSONValue` counts its depth from the envelope's root.
    static let payloadDecoder: JSONDecoder = {
        let decoder = makeDecoder()
        decoder.userInfo[JSONValue.depthAboveKey] = 1
        return decoder
    }()

    /// An envelope read once: its checked header, and either its JSON tree (`parse`) for decoding
    /// the payload without parsing the bytes again, or where its payload lies (`scanHeader`).
    public struct Parsed: @unchecked Sendable {
        public let header: EnvelopeHeader
        /// The tree, when the envelope was parsed; nil when its header was read by a scan.
        let object: [String: Any]?
        /// Where the payload's bytes lie, when the header was read by a scan.
        let payload: Range<Int>?

        init(header: EnvelopeHeader, object: [String: Any]) {
            self.header = header
            self.object = object
            payload = nil
        }

        init(header: EnvelopeHeader, payload: Range<Int>?) {
            self.header = header
            object = nil
            self.payload = payload
        }
    }

    public static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(WireDate.format(date))
        }
        return encoder
    }

    public static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = WireDate.parse(text) else {
                throw DecodingError.dataCorruptedError(
                    in: container, debugDescription: "'\(text)' is not an ISO 8601 date-time such as 2026-01-31T12:00:00Z")
            }
            return date
        }
        return decoder
    }

    // MARK: Encoding

    public static func encode<M: HubMessage>(_ message: M, id: String, auth: String? = nil) -> Data {
        encode(Envelope(id: id, auth: auth, payload: message))
    }

    public static func encode<M: HubMessage>(_ envelope: Envelope<M>) -> Data {
        do {
            return try writeAround(envelope)
        } catch {
            // Every message type is plain data; failing to encode one is a programming error.
            preconditionFailure("cannot encode \(M.messageType): \(error)")
        }
    }

    /// The envelope as `encoder` writes it (compact, keys sorted: auth, id, payload, type, v), with
    /// only the payload through the encoder (or written by itself, `writtenJSON`) and the header
    /// written around it. A string of the header that is not printable ASCII without `"` and `\`
    /// is written by the encoder, escaped as it escapes it; the others as they are.
    static func writeAround<M: HubMessage>(_ envelope: Envelope<M>) throws -> Data {
        let type = envelope.type.rawValue
        let payload = try envelope.payload.writtenJSON() ?? encoder.encode(envelope.payload)
        // Written into an array and handed over once: Data's generic appends cost more than the bytes.
        var out: [UInt8] = []
        out.reserveCapacity(payload.count + 40 + envelope.id.utf8.count + (envelope.auth?.utf8.count ?? 0) + type.utf8.count)
        if let auth = envelope.auth {
            out.append(contentsOf: #"{"auth":"#.utf8)
            appendString(auth, to: &out)
            out.append(contentsOf: #","id":"#.utf8)
        } else {
            out.append(contentsOf: #"{"id":"#.utf8)
        }
        appendString(envelope.id, to: &out)
        out.append(contentsOf: #","payload":"#.utf8)
        out.append(contentsOf: payload)
        out.append(contentsOf: #","type":"#.utf8)
        appendString(type, to: &out)
        out.append(contentsOf: #","v":"#.utf8)
        out.append(contentsOf: String(envelope.v).utf8)
        out.append(UInt8(ascii: "}"))
        return Data(out)
    }

    /// `text` as a JSON string, as `encoder` writes it: quoted as it is when plain, else by the encoder.
    static func appendString(_ text: String, to out: inout [UInt8]) {
        if isPlain(text) {
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: text.utf8)
            out.append(UInt8(ascii: "\""))
        } else {
            out.append(contentsOf: encodeValue(text))
        }
    }

    /// A string JSON writes as it is: printable ASCII other than `"` and `\`.
    static func isPlain(_ text: String) -> Bool {
        text.utf8.allSatisfy(isPlainByte)
    }

    /// A byte JSON writes as it is inside a string: printable ASCII other than `"` and `\`.
    static func isPlainByte(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x7f && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
    }

    /// A message's payload alone, as JSON, for surfaces that carry no envelope (the REST API).
    public static func encodePayload<M: HubMessage>(_ message: M) -> Data {
        encodeValue(message)
    }

    /// Any part of a payload, encoded as payloads are (dates as ISO 8601, sorted keys).
    public static func encodeValue<T: Encodable>(_ value: T) -> Data {
        do {
            return try encoder.encode(value)
        } catch {
            preconditionFailure("cannot encode \(T.self): \(error)")
        }
    }

    /// Decodes any part of a payload from the bytes `encodeValue` wrote for it.
    public static func decodeValue<T: Decodable>(_: T.Type, from data: Data) throws -> T {
        try decoder.decode(T.self, from: data)
    }

    /// Decodes a payload given without an envelope, as strictly as `decode`.
    public static func decodePayload<M: HubMessage>(_: M.Type, from data: Data) throws(HubError) -> M {
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw HubError(.invalidPayload, "'\(M.messageType)' must be a JSON object")
        }
        let payload: M
        do {
            payload = try decoder.decode(M.self, from: data)
        } catch let error as DecodingError {
            throw HubError(.invalidPayload, "'\(M.messageType)': \(describe(error, decoding: M.self, tree: object))")
        } catch {
            throw HubError(.invalidPayload, "'\(M.messageType)': \(error)")
        }
        if let field = unknownField(in: object, comparedWith: payload) {
            throw HubError(.unknownField, "'\(M.messageType)' has no field '\(field)'")
        }
        return payload
    }

    /// The error reply to a request with correlation id `id`.
    public static func encodeError(_ error: HubError, id: String) -> Data {
        encode(error.reply, id: id)
    }

    // MARK: Decoding

    /// Reads the envelope's header, checking its shape and version.
    public static func header(of data: Data) throws(HubError) -> EnvelopeHeader {
        try parse(data).header
    }

    /// Parses the envelope and checks its header.
    public static func parse(_ data: Data) throws(HubError) -> Parsed {
        let object = try jsonObject(data)
        for key in object.keys where !envelopeKeys.contains(key) {
            throw HubError(.unknownField, "the envelope has no field '\(key)'; its fields are v, type, id, auth and payload")
        }
        guard let number = object["v"] as? NSNumber, !isBoolean(number), let v = Int(exactly: number.doubleValue) else {
            throw HubError(.malformedEnvelope, "the envelope needs 'v', the protocol version, as an integer")
        }
        guard let type = object["type"] as? String, !type.isEmpty else {
            throw HubError(.malformedEnvelope, "the envelope needs 'type', the message type, as a non-empty string")
        }
        guard let id = object["id"] as? String else {
            throw HubError(.malformedEnvelope, "the envelope needs 'id', the correlation id, as a string")
        }
        let auth = object["auth"]
        if let auth, !(auth is String), !(auth is NSNull) {
            throw HubError(.malformedEnvelope, "'auth' must be a string")
        }
        guard HubProtocolVersion.supported.contains(v) else {
            throw HubError(
                .unsupportedVersion,
                "protocol version \(v) is not supported; this service speaks \(HubProtocolVersion.supported.lowerBound)...\(HubProtocolVersion.supported.upperBound)")
        }
        return Parsed(header: EnvelopeHeader(v: v, type: MessageType(rawValue: type), id: id, auth: auth as? String), object: object)
    }

    /// `parsed` when it holds the tree, else the envelope parsed.
    static func parsedOrParse(_ parsed: Parsed?, _ data: Data) throws(HubError) -> Parsed {
        if let parsed, parsed.object != nil { return parsed }
        return try parse(data)
    }

    /// The header of an envelope as this codec writes it, read in one pass over its bytes without
    /// building the tree. Nil for anything else, which `parse` then reads and checks: a member the
    /// envelope does not have, or one named twice or with an escape; a version that is not plain
    /// digits or that this build does not read; a type, id or auth that is not a string of
    /// printable ASCII without escapes; a payload that is not an object; bytes after the object.
    /// The payload itself is not checked here: decoding it is (`decodeChecked`).
    public static func scanHeader(_ data: Data) -> Parsed? {
        data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) -> Parsed? in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard let members = scanMembers(bytes) else { return nil }
            var v: Int?, type: String?, id: String?, auth: String?, authSeen = false, payload: Range<Int>?
            func plain(_ value: Range<Int>) -> String? { unescapedString(bytes, value, asciiOnly: true) }
            for (name, value) in members {
                switch (name.count, bytes[name.lowerBound]) {
                case (1, 0x76):  // v
                    guard v == nil, let number = plainDigits(bytes, value, atMost: 4) else { return nil }
                    v = Int(number)
                case (4, 0x74) where bytes[name].elementsEqual("type".utf8):
                    guard type == nil, let text = plain(value), !text.isEmpty else { return nil }
                    type = text
                case (2, 0x69) where bytes[name].elementsEqual("id".utf8):
                    guard id == nil, let text = plain(value) else { return nil }
                    id = text
                case (4, 0x61) where bytes[name].elementsEqual("auth".utf8):
                    guard !authSeen else { return nil }
                    authSeen = true
                    if value.count == 4, bytes[value].elementsEqual("null".utf8) { continue }
                    guard let text = plain(value) else { return nil }
                    auth = text
                case (7, 0x70) where bytes[name].elementsEqual("payload".utf8):
                    guard payload == nil, bytes[value.lowerBound] == 0x7b else { return nil }
                    payload = value
                default:
                    return nil
                }
            }
            guard let v, HubProtocolVersion.supported.contains(v), let type, let id else { return nil }
            return Parsed(header: EnvelopeHeader(v: v, type: MessageType(rawValue: type), id: id, auth: auth), payload: payload)
        }
    }

    /// The top-level `"id"` string of an envelope, found in one pass over the bytes without building
    /// the tree: for answering a request too large to parse with its own correlation id, and for
    /// matching a reply to its request.
    public static func scanID(_ data: Data) -> String? {
        guard let range = scanMember(data, "id") else { return nil }
        return data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) -> String? in
            let bytes = raw.bindMemory(to: UInt8.self)
            // A plain string of at most 256 bytes: the ids this hub makes.
            guard range.count >= 2, range.count <= 258, bytes[range.lowerBound] == 0x22, bytes[range.upperBound - 1] == 0x22,
                !bytes[range.lowerBound + 1..<range.upperBound - 1].contains(0x5c)
            else { return nil }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[range.lowerBound + 1..<range.upperBound - 1]), as: UTF8.self)
        }
    }

    /// The correlation id of a reply, by a scan of its bytes, or by a parse when the scan finds none.
    public static func replyID(_ data: Data) -> String? {
        scanID(data) ?? (try? parse(data))?.header.id
    }

    /// Where the value of the top-level member `key` of a JSON object lies in its bytes (offsets
    /// from the start of `data`), found in one pass without building the tree. Nil when the bytes
    /// are not an object as far as one pass can tell, when no member has that name, when two do,
    /// or when any member's name has an escape (which could spell `key` another way).
    /// (`scanMembers` says what one pass tells.)
    public static func scanMember(_ data: Data, _ key: String) -> Range<Int>? {
        data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) -> Range<Int>? in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard let members = scanMembers(bytes) else { return nil }
            var found: Range<Int>?
            for (name, value) in members where bytes[name].elementsEqual(key.utf8) {
                guard found == nil else { return nil }
                found = value
            }
            return found
        }
    }

    /// A scanned member's value that is a JSON string without escapes or control characters, in
    /// valid UTF-8, without its quotes; with `asciiOnly`, of printable ASCII alone.
    static func unescapedString(_ bytes: UnsafeBufferPointer<UInt8>, _ value: Range<Int>, asciiOnly: Bool) -> String? {
        guard value.count >= 2, bytes[value.lowerBound] == 0x22, bytes[value.upperBound - 1] == 0x22 else { return nil }
        let inner = UnsafeBufferPointer(rebasing: bytes[(value.lowerBound + 1)..<(value.upperBound - 1)])
        guard !inner.contains(where: { $0 < 0x20 || $0 == 0x5c || $0 == 0x22 || (asciiOnly && $0 >= 0x7f) }) else { return nil }
        return String(validating: inner, as: UTF8.self)
    }

    /// A scanned member's value that is plain digits, at most `atMost` of them, without the
    /// leading zero JSON does not allow.
    static func plainDigits(_ bytes: UnsafeBufferPointer<UInt8>, _ value: Range<Int>, atMost: Int) -> UInt64? {
        let digits = UnsafeBufferPointer(rebasing: bytes[value])
        guard !digits.isEmpty, digits.count <= atMost, digits.count == 1 || digits[0] != 0x30,
            digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })
        else { return nil }
        return digits.reduce(0) { $0 * 10 + UInt64($1 - 0x30) }
    }

    /// The deepest a member's value may be nested for `scanMembers` to take it.
    static let maxScanDepth = JSONValue.maxParseDepth

    /// The top-level members of the JSON object in `bytes`: where each one's name (without its
    /// quotes) and value lie. One pass, without building the tree; nil when the bytes are not an
    /// object as far as one pass can tell (values are skipped, not checked), when anything but
    /// white space follows it, when a member's name has an escape, or when a value is nested
    /// deeper than `maxScanDepth`.
    static func scanMembers(_ bytes: UnsafeBufferPointer<UInt8>) -> [(name: Range<Int>, value: Range<Int>)]? {
        var index = 0
        let end = bytes.count
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0a || byte == 0x0d }
        func skipSpace() { while index < end, isSpace(bytes[index]) { index += 1 } }
        // Reads a string starting at a quote; nil when it is malformed.
        func string() -> (start: Int, end: Int, escaped: Bool)? {
            guard index < end, bytes[index] == 0x22 else { return nil }
            index += 1
            let start = index
            var escaped = false
            while index < end {
                switch bytes[index] {
                case 0x5c: escaped = true; index += 2
                case 0x22: index += 1; return (start, index - 1, escaped)
                default: index += 1
                }
            }
            return nil
        }
        // Skips one value of any kind; one linear pass, whatever its size.
        func skipValue() -> Bool {
            guard index < end else { return false }
            switch bytes[index] {
            case 0x22:
                return string() != nil
            case 0x7b, 0x5b:
                var depth = 0
                while index < end {
                    switch bytes[index] {
                    case 0x22:
                        guard string() != nil else { return false }
                        continue
                    case 0x7b, 0x5b:
                        // Deeper than a value decoded alone may go and still be what it is inside its
                        // document (Foundation's parser stops at 512 levels): left to the parse.
                        depth += 1
                        guard depth <= maxScanDepth else { return false }
                    case 0x7d, 0x5d:
                        depth -= 1
                        if depth == 0 { index += 1; return true }
                    default:
                        break
                    }
                    index += 1
                }
                return false
            default:
                let start = index
                while index < end, bytes[index] != 0x2c, bytes[index] != 0x7d, bytes[index] != 0x5d, !isSpace(bytes[index]) { index += 1 }
                return index > start
            }
        }
        skipSpace()
        guard index < end, bytes[index] == 0x7b else { return nil }
        index += 1
        var members: [(name: Range<Int>, value: Range<Int>)] = []
        members.reserveCapacity(6)
        skipSpace()
        if index < end, bytes[index] == 0x7d {
            index += 1
            skipSpace()
            return index == end ? members : nil
        }
        while index < end {
            skipSpace()
            guard let member = string(), !member.escaped else { return nil }
            skipSpace()
            guard index < end, bytes[index] == 0x3a else { return nil }
            index += 1
            skipSpace()
            let valueStart = index
            guard skipValue() else { return nil }
            members.append((member.start..<member.end, valueStart..<index))
            skipSpace()
            guard index < end else { return nil }
            if bytes[index] == 0x7d {
                index += 1
                skipSpace()
                return index == end ? members : nil
            }
            guard bytes[index] == 0x2c else { return nil }
            index += 1
        }
        return nil
    }

    /// JSON booleans come out of JSONSerialization as NSNumbers of type char.
    static func isBoolean(_ number: NSNumber) -> Bool {
        String(cString: number.objCType) == "c"
    }

    /// Decodes a whole envelope of a known type; fields the type does not have are refused unless `extraFields` says otherwise.
    public static func decode<M: HubMessage>(_: M.Type, from data: Data, parsed: Parsed? = nil, extraFields: ExtraFields = .refused)
        throws(HubError) -> Envelope<M>
    {
        try decodeChecked(M.self, from: data, parsed: parsed, extraFields: extraFields).envelope
    }

    /// Like `decode`, also returning the payload as `encodeValue` writes it, when the check for
    /// unknown fields made it (a request whose payload has fields): what a handler that stores the
    /// payload would otherwise encode again.
    public static func decodeChecked<M: HubMessage>(
        _: M.Type, from data: Data, parsed: Parsed? = nil, extraFields: ExtraFields = .refused
    ) throws(HubError) -> (envelope: Envelope<M>, payloadJSON: Data?) {
        // An envelope as this codec writes it decodes in one pass, and its payload's own bytes,
        // the same as the payload encoded again, show that it has no field the type lacks.
        // Anything else is parsed, checked and answered in full below, reusing what this pass made.
        // (Only for requests: the byte comparison is what shows a payload to be JSON as strict as
        // the parser's, where the decoder alone passes over what it does not read.)
        let scanned: Parsed? = if let parsed { parsed.object == nil ? parsed : nil } else { scanHeader(data) }
        var decoded: Envelope<M>?
        var reencoded: Data?
        if case .refused = extraFields, let scanned, scanned.header.type == M.messageType, let range = scanned.payload,
            let envelope = scannedEnvelope(M.self, data, scanned.header, payload: range)
        {
            decoded = envelope
            // `{}`: no fields at all.
            if range.count == 2 { return (envelope, nil) }
            reencoded = envelope.payload.writtenJSON() ?? (try? encoder.encode(envelope.payload))
            if let reencoded, range.count == reencoded.count,
                data.member(at: range) == reencoded
            {
                return (envelope, reencoded)
            }
        }
        let parsed = try parsedOrParse(parsed, data)
        let header = parsed.header
        guard header.type == M.messageType else {
            throw HubError(.unknownType, "expected a '\(M.messageType)' message, got '\(header.type)'")
        }
        // A type without fields decodes from any value, so the shape is checked here for every type.
        let object = parsed.object ?? [:]
        if let payload = object["payload"], !(payload is [String: Any]) {
            throw HubError(.invalidPayload, "'\(M.messageType)': 'payload' must be a JSON object, such as {}")
        }
        let envelope: Envelope<M>
        if let decoded {
            envelope = decoded
        } else {
            do {
                envelope = try decoder.decode(Envelope<M>.self, from: data)
            } catch let error as DecodingError {
                throw HubError(.invalidPayload, "'\(M.messageType)': \(describe(error, decoding: Envelope<M>.self, tree: object))")
            } catch {
                throw HubError(.invalidPayload, "'\(M.messageType)': \(error)")
            }
        }
        guard case .refused = extraFields else { return (envelope, nil) }
        // Where the first pass compared the payload's bytes already, it is not done again.
        let (field, encoded) = check(object["payload"], against: envelope.payload, in: reencoded == nil ? data : nil, reencoded: reencoded)
        if let field { throw HubError(.unknownField, "'\(M.messageType)' has no field '\(field)'") }
        return (envelope, encoded)
    }

    /// Decodes a reply: the expected type, or the error it carries as a thrown `HubError`. Unlike a
    /// request, a reply may hold fields its type does not have: a newer service may add to its
    /// replies without breaking older clients, so they are passed over, not refused.
    ///
    /// A reply of the expected type in the form this codec writes (`scanHeader`: a version this
    /// build reads, an object for its payload) decodes in one pass. Anything else (an error reply,
    /// a malformed one) is parsed for its header, and answered as such.
    public static func decodeReply<R: HubMessage>(_: R.Type, from data: Data, parsed: Parsed? = nil) throws(HubError)
        -> Envelope<R>
    {
        if let scanned = scanHeader(data), scanned.header.type == R.messageType, let range = scanned.payload,
            let envelope = scannedEnvelope(R.self, data, scanned.header, payload: range)
        {
            return envelope
        }
        let parsed = try parsedOrParse(parsed, data)
        if parsed.header.type == ErrorReply.messageType {
            let error = try decode(ErrorReply.self, from: data, parsed: parsed, extraFields: .passed).payload
            throw HubError(error.code, error.message)
        }
        return try decode(R.self, from: data, parsed: parsed, extraFields: .passed)
    }

    /// An envelope whose header a scan read, with only its payload's bytes decoded; nil when they
    /// do not decode.
    static func scannedEnvelope<M: HubMessage>(_: M.Type, _ data: Data, _ header: EnvelopeHeader, payload range: Range<Int>) -> Envelope<M>? {
        let bytes = data.member(at: range)
        guard let payload = bytes.withUnsafeBytes(M.readWritten) ?? (try? payloadDecoder.decode(M.self, from: bytes))
        else { return nil }
        var envelope = Envelope(id: header.id, auth: header.auth, payload: payload)
        envelope.v = header.v
        return envelope
    }

    /// What `decode` does with fields a payload's type does not have.
    public enum ExtraFields: Sendable {
        /// Refused with `unknown_field`: the rule for requests.
        case refused
        /// Passed over: the rule for replies.
        case passed
    }

    // MARK: Helpers

    static func jsonObject(_ data: Data) throws(HubError) -> [String: Any] {
        if data.isEmpty { throw HubError(.emptyMessage, "the message is empty; send a JSON envelope") }
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: data, options: [])
        } catch {
            throw HubError(.malformedEnvelope, "the message is not valid JSON; send a JSON envelope {\"v\":1,\"type\":…,\"id\":…,\"payload\":{…}}")
        }
        guard let object = parsed as? [String: Any] else {
            throw HubError(.malformedEnvelope, "the envelope must be a JSON object")
        }
        return object
    }

    /// The first field path present in the input payload but absent from the decoded value,
    /// found by encoding the value again and comparing the two trees.
    static func unknownField<M: HubMessage>(in inputPayload: Any?, comparedWith payload: M) -> String? {
        check(inputPayload, against: payload).field
    }

    /// `unknownField`, with the payload encoded again for the comparison (nil when the input had no
    /// fields). When the request's own payload bytes (in `envelope`) are the same as the payload
    /// encoded again, as they are from a client that encodes as this codec does, it has no field
    /// the type lacks, and the trees need no comparing.
    private static func check<M: HubMessage>(_ inputPayload: Any?, against payload: M, in envelope: Data? = nil, reencoded: Data? = nil)
        -> (field: String?, encoded: Data?)
    {
        guard let inputPayload, let object = inputPayload as? [String: Any], !object.isEmpty,
            let reencoded = reencoded ?? (try? encoder.encode(payload))
        else { return (nil, nil) }
        if let envelope, let range = scanMember(envelope, "payload"), range.count == reencoded.count,
            envelope.member(at: range) == reencoded
        {
            return (nil, reencoded)
        }
        guard let known = try? JSONSerialization.jsonObject(with: reencoded, options: [.fragmentsAllowed]) else { return (nil, nil) }
        return (firstExtraKey(inputPayload, known, path: ""), reencoded)
    }

    private static func firstExtraKey(_ input: Any, _ known: Any, path: String) -> String? {
        switch (input, known) {
        case let (input as [String: Any], known as [String: Any]):
            for key in input.keys.sorted() {
                let value = input[key]!
                let child = path.isEmpty ? key : "\(path).\(key)"
                guard let knownValue = known[key] else {
                    if value is NSNull { continue }
                    return child
                }
                if let extra = firstExtraKey(value, knownValue, path: child) { return extra }
            }
            return nil
        case let (input as [Any], known as [Any]):
            for (index, pair) in zip(input, known).enumerated() {
                if let extra = firstExtraKey(pair.0, pair.1, path: "\(path)[\(index)]") { return extra }
            }
            return nil
        default:
            return nil
        }
    }

    /// Like `describe(_:)`, and when the decoder names no field (as for a number that does not
    /// fit its field: -1 for a count, 2^63 for an Int, 1.5 for a whole number), finds the field by
    /// putting 0 in place of each number in turn until the input decodes.
    static func describe<T: Decodable>(_ error: DecodingError, decoding type: T.Type, tree: Any) -> String {
        guard case .dataCorrupted(let context) = error, context.codingPath.isEmpty else { return describe(error) }
        var numbers: [([String], NSNumber)] = []
        collectNumbers(tree, path: [], into: &numbers)
        for (path, number) in numbers.prefix(64) {
            guard let replaced = replacing(path[...], in: tree, with: 0),
                let data = try? JSONSerialization.data(withJSONObject: replaced)
            else { continue }
            do {
                _ = try decoder.decode(T.self, from: data)
            } catch let other as DecodingError {
                if case .dataCorrupted(let again) = other, again.codingPath.isEmpty { continue }
            } catch {
                continue
            }
            let name = path.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
            let value = number.stringValue
            let reason = value.contains(".") || value.contains("e") || value.contains("E")
                ? "must be a whole number"
                : value.hasPrefix("-") ? "must not be negative" : "is too large for this field"
            return "'\(name)' is \(value) but \(reason)"
        }
        return describe(error)
    }

    private static func collectNumbers(_ value: Any, path: [String], into numbers: inout [([String], NSNumber)]) {
        switch value {
        case let object as [String: Any]:
            for key in object.keys.sorted() { collectNumbers(object[key]!, path: path + [key], into: &numbers) }
        case let array as [Any]:
            for (index, element) in array.enumerated() { collectNumbers(element, path: path + ["[\(index)]"], into: &numbers) }
        case let number as NSNumber where !isBoolean(number):
            numbers.append((path, number))
        default:
            break
        }
    }

    private static func replacing(_ path: ArraySlice<String>, in value: Any, with replacement: Any) -> Any? {
        guard let first = path.first else { return replacement }
        if var object = value as? [String: Any], let child = object[first] {
            object[first] = replacing(path.dropFirst(), in: child, with: replacement)
            return object
        }
        if var array = value as? [Any], first.hasPrefix("["), let index = Int(first.dropFirst().dropLast()), array.indices.contains(index) {
            array[index] = replacing(path.dropFirst(), in: array[index], with: replacement) as Any
            return array
        }
        return nil
    }

    public static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            let joined = keys.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
            return joined.isEmpty ? "the payload" : "'\(joined)'"
        }
        switch error {
        case .keyNotFound(let key, let context):
            let parent = path(context)
            return "missing field '\(key.stringValue)'" + (context.codingPath.count > 1 ? " in \(parent)" : "")
        case .typeMismatch(let type, let context):
            return "\(path(context)) must be \(describe(type))"
        case .valueNotFound(let type, let context):
            return "\(path(context)) must be \(describe(type)), not null"
        case .dataCorrupted(let context):
            return "\(path(context)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Int.Type, is Int64.Type, is UInt64.Type, is Int32.Type: return "an integer"
        case is Double.Type: return "a number"
        case is Bool.Type: return "true or false"
        case is [Any].Type: return "an array"
        default:
            let name = "\(type)"
            return name.hasPrefix("Dictionary") || name.hasPrefix("KeyedDecoding") ? "an object" : "a \(name)"
        }
    }
}

/// Dates on the wire: ISO 8601 in UTC with milliseconds, such as 2026-01-31T12:00:00.000Z.
/// Reading also takes the form without fractional seconds.
public enum WireDate {
    static let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
    static let plain = Date.ISO8601FormatStyle()

    /// The date to the nearest millisecond, as `2026-01-31T12:00:00.250Z`. Foundation's style with
    /// fractional seconds cuts the fraction off instead, so a date read back from its own text (a
    /// binary fraction a hair below the decimal one) would be written a millisecond earlier each
    /// time it went through the codec; rounding writes it back the same.
    public static func format(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1_000).rounded()
        guard milliseconds.magnitude < 1e15 else { return date.formatted(withFraction) }
        let whole = Int64(milliseconds)
        let seconds = whole >= 0 ? whole / 1_000 : (whole - 999) / 1_000
        let fraction = Int(whole - seconds * 1_000)
        if let text = written(seconds: seconds, milliseconds: fraction) { return text }
        var text = Date(timeIntervalSince1970: Double(seconds)).formatted(plain)
        guard text.last == "Z" else { return date.formatted(withFraction) }
        text.removeLast()
        let digits = String(fraction)
        return text + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
    }

    /// `format`'s text for a second from 1970 through 9999 and its milliseconds, from the
    /// days' civil date (Hinnant's `civil_from_days`); nil for any other second, which Foundation's
    /// style writes. Every announcement of a send writes two of these.
    static func written(seconds: Int64, milliseconds: Int) -> String? {
        guard seconds >= 0, seconds < 253_402_300_800, (0..<1_000).contains(milliseconds) else { return nil }
        let days = seconds / 86_400, time = Int(seconds % 86_400)
        let shifted = days + 719_468
        let era = shifted / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * monthFromMarch + 2) / 5 + 1)
        let month = Int(monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9)
        let year = Int(yearOfEra + era * 400 + (month <= 2 ? 1 : 0))
        return String(unsafeUninitializedCapacity: 24) { text in
            func put(_ value: Int, _ at: Int, _ width: Int) {
                var value = value
                for index in stride(from: at + width - 1, through: at, by: -1) {
                    text[index] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
            }
            put(year, 0, 4)
            text[4] = UInt8(ascii: "-")
            put(month, 5, 2)
            text[7] = UInt8(ascii: "-")
            put(day, 8, 2)
            text[10] = UInt8(ascii: "T")
            put(time / 3_600, 11, 2)
            text[13] = UInt8(ascii: ":")
            put(time / 60 % 60, 14, 2)
            text[16] = UInt8(ascii: ":")
            put(time % 60, 17, 2)
            text[19] = UInt8(ascii: ".")
            put(milliseconds, 20, 3)
            text[23] = UInt8(ascii: "Z")
            return 24
        }
    }

    public static func parse(_ text: String) -> Date? {
        if let date = parseWritten(text) { return date }
        return (try? withFraction.parse(text)) ?? (try? plain.parse(text))
    }

    /// A date in the form `format` writes, or the same without its fraction, read from its digits
    /// (`timegm` turns the fields into seconds): several times faster than Foundation's parser, which
    /// reads anything else (another form, a field out of its range, a year before 1970) as before.
    static func parseWritten(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { bytes -> Date? in
            let count = bytes.count
            guard count == 20 || count == 24, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
                bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[count - 1] == UInt8(ascii: "Z"),
                count == 20 || bytes[19] == UInt8(ascii: ".")
            else { return nil }
            func number(_ start: Int, _ width: Int) -> Int32? {
                var value: Int32 = 0
                for index in start..<(start + width) {
                    guard bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") else { return nil }
                    value = value * 10 + Int32(bytes[index] - UInt8(ascii: "0"))
                }
                return value
            }
            guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2), let hour = number(11, 2),
                let minute = number(14, 2), let second = number(17, 2), let milliseconds = count == 24 ? number(20, 3) : 0,
                year >= 1970, (1...12).contains(month), day >= 1, hour < 24, minute < 60, second < 60
            else { return nil }
            var fields = tm()
            fields.tm_year = year - 1900
            fields.tm_mon = month - 1
            fields.tm_mday = day
            fields.tm_hour = hour
            fields.tm_min = minute
            fields.tm_sec = second
            let seconds = timegm(&fields)
            // timegm carries a day past the month's end into the next month; such a date is Foundation's to read.
            guard seconds != -1, fields.tm_mday == day, fields.tm_mon == month - 1 else { return nil }
            // From the reference date, as Foundation's parser counts, so that both give the same date.
            return Date(timeIntervalSinceReferenceDate: Double(Int(seconds) - 978_307_200) + Double(milliseconds) / 1_000)
        }
    }
}

extension Data {
    /// The bytes a scan found at `range`, counted from the start of this data (which may be a slice).
    func member(at range: Range<Int>) -> Data {
        self[(startIndex + range.lowerBound)..<(startIndex + range.upperBound)]
    }
}
