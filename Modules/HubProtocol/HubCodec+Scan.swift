import Foundation

/// Reading an envelope as this codec writes it in one pass over its bytes, without building its
/// JSON tree: the header, the id, and where a member lies.
extension HubCodec {
    /// The header of an envelope as this codec writes it, read in one pass over its bytes without
    /// building the tree. Nil for anything else, which `parse` then reads and checks: a member the
    /// envelope does not have, or one named twice or with an escape; a version that is not plain
    /// digits or that this build does not read; a type, id, auth or hub that is not a string of
    /// printable ASCII without escapes; a payload that is not an object; bytes after the object.
    /// The payload itself is not checked here: decoding it is (`decodeChecked`).
    public static func scanHeader(_ data: Data) -> Parsed? {
        data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) -> Parsed? in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard let members = scanMembers(bytes) else { return nil }
            var v: Int?, type: String?, id: String?, auth: String?, authSeen = false, hub: String?, hubSeen = false, payload: Range<Int>?
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
                case (3, 0x68) where bytes[name].elementsEqual("hub".utf8):
                    guard !hubSeen else { return nil }
                    hubSeen = true
                    if value.count == 4, bytes[value].elementsEqual("null".utf8) { continue }
                    guard let text = plain(value) else { return nil }
                    hub = text
                case (7, 0x70) where bytes[name].elementsEqual("payload".utf8):
                    guard payload == nil, bytes[value.lowerBound] == 0x7b else { return nil }
                    payload = value
                default:
                    return nil
                }
            }
            guard let v, HubProtocolVersion.supported.contains(v), let type, let id else { return nil }
            return Parsed(header: EnvelopeHeader(v: v, type: MessageType(rawValue: type), id: id, auth: auth, hub: hub), payload: payload)
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
        // Absent when the reply is not an envelope.
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
}

extension Data {
    /// The bytes a scan found at `range`, counted from the start of this data (which may be a slice).
    func member(at range: Range<Int>) -> Data {
        self[(startIndex + range.lowerBound)..<(startIndex + range.upperBound)]
    }
}
