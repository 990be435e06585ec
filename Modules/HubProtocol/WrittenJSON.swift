import Foundation

/// Writes a payload's JSON exactly as `HubCodec`'s encoder would (compact, keys in byte order),
/// for the members of a hot message that are plain: strings of printable ASCII other than `"` and
/// `\`, whole numbers, and maps of such strings. Anything else makes the writer give up (nil),
/// and the encoder writes the payload instead.
struct WrittenJSONWriter {
    private(set) var bytes: [UInt8] = [UInt8(ascii: "{")]
    private(set) var failed = false

    init(capacity: Int = 128) {
        bytes.reserveCapacity(capacity)
    }

    /// The object, closed; nil when a member could not be written plainly.
    mutating func finish() -> Data? {
        guard !failed else { return nil }
        bytes.append(UInt8(ascii: "}"))
        return Data(bytes)
    }

    /// Gives up: the member has a value this writer does not write.
    mutating func fail(if present: Bool) {
        if present { failed = true }
    }

    private mutating func key(_ name: StaticString) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: #"":"#.utf8)
    }

    private mutating func quoted(_ text: String) {
        guard HubCodec.isPlain(text) else {
            failed = true
            return
        }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: text.utf8)
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func string(_ name: StaticString, _ value: String?) {
        guard let value, !failed else { return }
        key(name)
        quoted(value)
    }

    mutating func int(_ name: StaticString, _ value: Int?) {
        guard let value, !failed else { return }
        key(name)
        bytes.append(contentsOf: String(value).utf8)
    }

    mutating func map(_ name: StaticString, _ value: [String: String]?) {
        guard let value, !failed else { return }
        key(name)
        bytes.append(UInt8(ascii: "{"))
        for (index, entry) in value.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }).enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            quoted(entry.key)
            bytes.append(UInt8(ascii: ":"))
            quoted(entry.value)
        }
        bytes.append(UInt8(ascii: "}"))
    }
}

/// Reads exactly the form `WrittenJSONWriter` writes, and nothing else: no whitespace, members in
/// byte order with no key twice, plain strings, whole numbers without leading zeros. Such bytes
/// are JSON that the decoder reads to the same value, so a payload read here needs no decoder.
struct WrittenJSONReader {
    private let bytes: UnsafeRawBufferPointer
    private var at = 0
    /// The last key read at the object's top level, for the order check.
    private var lastKey: [UInt8] = []

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    /// A plain string's bytes.
    private mutating func plain() -> UnsafeRawBufferPointer? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = at
        while at < bytes.count {
            let byte = bytes[at]
            if byte == UInt8(ascii: "\"") {
                at += 1
                return UnsafeRawBufferPointer(rebasing: bytes[start..<(at - 1)])
            }
            guard HubCodec.isPlainByte(byte) else { return nil }
            at += 1
        }
        return nil
    }

    /// Opens the object; true when it has no members.
    mutating func open() -> Bool? {
        guard take(UInt8(ascii: "{")) else { return nil }
        return take(UInt8(ascii: "}"))
    }

    /// The next member's key, after the one before it in byte order; nil at the object's end (or
    /// when the bytes are not in the written form: `done` tells).
    mutating func nextKey() -> String? {
        if !lastKey.isEmpty && !take(UInt8(ascii: ",")) { return nil }
        guard let key = plain(), take(UInt8(ascii: ":")), lastKey.lexicographicallyPrecedes(key) else {
            broken = true
            return nil
        }
        lastKey = Array(key)
        return String(decoding: key, as: UTF8.self)
    }

    /// A member began but did not read.
    private var broken = false

    /// Every byte is read.
    var atEnd: Bool { at == bytes.count }

    /// After the last member: the object closes and the bytes end there.
    mutating func done() -> Bool {
        !broken && take(UInt8(ascii: "}")) && at == bytes.count
    }

    mutating func string() -> String? {
        plain().map { String(decoding: $0, as: UTF8.self) }
    }

    mutating func int() -> Int? {
        let negative = take(UInt8(ascii: "-"))
        let start = at
        var value = 0
        while at < bytes.count, bytes[at] >= UInt8(ascii: "0"), bytes[at] <= UInt8(ascii: "9") {
            let digit = Int(bytes[at] - UInt8(ascii: "0"))
            let (times, over) = value.multipliedReportingOverflow(by: 10)
            let (sum, past) = negative ? times.subtractingReportingOverflow(digit) : times.addingReportingOverflow(digit)
            guard !over, !past else { return nil }
            value = sum
            at += 1
        }
        // At least one digit, no leading zero, and not "-0", which the encoder never writes.
        let digits = at - start
        guard digits > 0, digits == 1 || bytes[start] != UInt8(ascii: "0"), !(negative && value == 0) else { return nil }
        return value
    }

    mutating func map() -> [String: String]? {
        guard take(UInt8(ascii: "{")) else { return nil }
        var map: [String: String] = [:]
        if take(UInt8(ascii: "}")) { return map }
        var previous: UnsafeRawBufferPointer?
        repeat {
            guard let key = plain(), previous.map({ $0.lexicographicallyPrecedes(key) }) ?? true, take(UInt8(ascii: ":")),
                let value = plain()
            else { return nil }
            previous = key
            map[String(decoding: key, as: UTF8.self)] = String(decoding: value, as: UTF8.self)
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "}")) ? map : nil
    }
}

/// The written form read from outside the protocol's own messages.
public enum WrittenJSON {
    /// An object of plain strings in the written form (compact, keys in byte order, such as
    /// `{"messageParam":"hello"}`); nil for any other bytes, which the decoder then reads.
    public static func stringMap(_ data: Data) -> [String: String]? {
        data.withUnsafeBytes { raw in
            var reader = WrittenJSONReader(raw)
            guard let map = reader.map(), reader.atEnd else { return nil }
            return map
        }
    }
}

extension SendNotification {
    /// A send whose members are plain (as a template send's properties and tag expression usually
    /// are), written without the encoder; nil for one with a rich reference, a schedule, a test
    /// flag, a batch of installations, or a string JSON would escape (a native JSON body).
    public func writtenJSON() -> Data? {
        var writer = WrittenJSONWriter(capacity: 64 + (body?.utf8.count ?? 0) + (properties?.count ?? 0) * 32)
        writer.fail(if: rich != nil || scheduledAt != nil || test != nil || installationIds != nil)
        writer.string("body", body)
        writer.string("format", format.rawValue)
        writer.map("headers", headers)
        writer.string("hub", hub)
        writer.string("idempotencyKey", idempotencyKey)
        writer.string("installationId", installationId)
        writer.string("platform", platform?.rawValue)
        writer.map("properties", properties)
        writer.string("tagExpression", tagExpression)
        writer.int("timeToLive", timeToLive)
        writer.string("userId", userId)
        return writer.finish()
    }

    public static func readWritten(_ bytes: UnsafeRawBufferPointer) -> SendNotification? {
        var reader = WrittenJSONReader(bytes)
        guard reader.open() == false else { return nil }
        var send = SendNotification(format: .native)
        var format: NotificationFormat?
        while let key = reader.nextKey() {
            // A member that does not read in the written form leaves the whole send to the decoder.
            switch key {
            case "body": guard let value = reader.string() else { return nil }; send.body = value
            case "format": guard let value = reader.string().flatMap(NotificationFormat.init(rawValue:)) else { return nil }; format = value
            case "headers": guard let value = reader.map() else { return nil }; send.headers = value
            case "hub": guard let value = reader.string() else { return nil }; send.hub = value
            case "idempotencyKey": guard let value = reader.string() else { return nil }; send.idempotencyKey = value
            case "installationId": guard let value = reader.string() else { return nil }; send.installationId = value
            case "platform": guard let value = reader.string().flatMap(Platform.init(rawValue:)) else { return nil }; send.platform = value
            case "properties": guard let value = reader.map() else { return nil }; send.properties = value
            case "tagExpression": guard let value = reader.string() else { return nil }; send.tagExpression = value
            case "timeToLive": guard let value = reader.int() else { return nil }; send.timeToLive = value
            case "userId": guard let value = reader.string() else { return nil }; send.userId = value
            default: return nil
            }
        }
        guard reader.done(), let format else { return nil }
        send.format = format
        return send
    }
}

extension SendAccepted {
    /// `{"notificationId":"…","state":"…"}`, when the id is plain.
    public func writtenJSON() -> Data? {
        var writer = WrittenJSONWriter(capacity: 40 + notificationId.utf8.count)
        writer.string("notificationId", notificationId)
        writer.string("state", state.rawValue)
        return writer.finish()
    }

    public static func readWritten(_ bytes: UnsafeRawBufferPointer) -> SendAccepted? {
        var reader = WrittenJSONReader(bytes)
        guard reader.open() == false, reader.nextKey() == "notificationId", let id = reader.string(),
            reader.nextKey() == "state", let state = reader.string().flatMap(NotificationState.init(rawValue:)),
            reader.nextKey() == nil, reader.done()
        else { return nil }
        return SendAccepted(notificationId: id, state: state)
    }
}
