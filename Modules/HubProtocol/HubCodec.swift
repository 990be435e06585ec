import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Turns messages into envelope bytes and back. Decoding is strict: a malformed envelope, an
/// unsupported version, a missing field or a field the type does not have is a `HubError` that
/// names the problem, never a crash.
public enum HubCodec {
    static let envelopeKeys: Set<String> = ["v", "type", "id", "auth", "hub", "payload"]
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

    public static func encode<M: HubMessage>(_ message: M, id: String, auth: String? = nil, hub: String? = nil) -> Data {
        encode(Envelope(id: id, auth: auth, hub: hub, payload: message))
    }

    public static func encode<M: HubMessage>(_ envelope: Envelope<M>) -> Data {
        do {
            return try writeAround(envelope)
        } catch {
            // Every message type is plain data; failing to encode one is a programming error.
            preconditionFailure("cannot encode \(M.messageType): \(error)")
        }
    }

    /// The envelope as `encoder` writes it (compact, keys sorted: auth, hub, id, payload, type, v), with
    /// only the payload through the encoder (or written by itself, `writtenJSON`) and the header
    /// written around it. A string of the header that is not printable ASCII without `"` and `\`
    /// is written by the encoder, escaped as it escapes it; the others as they are.
    static func writeAround<M: HubMessage>(_ envelope: Envelope<M>) throws -> Data {
        writeAround(
            payload: try envelope.payload.writtenJSON() ?? encoder.encode(envelope.payload), type: envelope.type.rawValue, id: envelope.id,
            auth: envelope.auth, hub: envelope.hub, v: envelope.v)
    }

    /// A message whose payload is written already, as the encoder writes it (`InstallationChanged.payload`).
    public static func encode<M: HubMessage>(_: M.Type, payload: Data, id: String) -> Data {
        writeAround(payload: payload, type: M.messageType.rawValue, id: id, auth: nil, hub: nil, v: HubProtocolVersion.current)
    }

    private static func writeAround(payload: Data, type: String, id: String, auth: String?, hub: String?, v: Int) -> Data {
        // Written into an array and handed over once: Data's generic appends cost more than the bytes.
        var out: [UInt8] = []
        out.reserveCapacity(
            payload.count + 48 + id.utf8.count + (auth?.utf8.count ?? 0) + (hub?.utf8.count ?? 0) + type.utf8.count)
        out.append(UInt8(ascii: "{"))
        if let auth {
            out.append(contentsOf: #""auth":"#.utf8)
            appendString(auth, to: &out)
            out.append(UInt8(ascii: ","))
        }
        if let hub {
            out.append(contentsOf: #""hub":"#.utf8)
            appendString(hub, to: &out)
            out.append(UInt8(ascii: ","))
        }
        out.append(contentsOf: #""id":"#.utf8)
        appendString(id, to: &out)
        out.append(contentsOf: #","payload":"#.utf8)
        out.append(contentsOf: payload)
        out.append(contentsOf: #","type":"#.utf8)
        appendString(type, to: &out)
        out.append(contentsOf: #","v":"#.utf8)
        out.append(contentsOf: String(v).utf8)
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
        // Not a JSON object is refused just below.
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
            throw HubError(.unknownField, "the envelope has no field '\(key)'; its fields are v, type, id, auth, hub and payload")
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
        let hub = object["hub"]
        if let hub, !(hub is String), !(hub is NSNull) {
            throw HubError(.malformedEnvelope, "'hub' must be a string: the name of the hub the request is for")
        }
        guard HubProtocolVersion.supported.contains(v) else {
            throw HubError(
                .unsupportedVersion,
                "protocol version \(v) is not supported; this service speaks \(HubProtocolVersion.supported.lowerBound)...\(HubProtocolVersion.supported.upperBound)")
        }
        return Parsed(header: EnvelopeHeader(v: v, type: MessageType(rawValue: type), id: id, auth: auth as? String, hub: hub as? String), object: object)
    }

    /// `parsed` when it holds the tree, else the envelope parsed.
    static func parsedOrParse(_ parsed: Parsed?, _ data: Data) throws(HubError) -> Parsed {
        if let parsed, parsed.object != nil { return parsed }
        return try parse(data)
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
            // Without the bytes, the full check below runs instead.
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
        // Nil sends the request down the full parse, which says what is wrong.
        guard let payload = bytes.withUnsafeBytes(M.readWritten) ?? (try? payloadDecoder.decode(M.self, from: bytes))
        else { return nil }
        var envelope = Envelope(id: header.id, auth: header.auth, hub: header.hub, payload: payload)
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
}
