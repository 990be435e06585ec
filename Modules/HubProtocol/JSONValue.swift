import Foundation

/// Any JSON value, for fields whose shape the protocol leaves open: patch values, raw payloads,
/// request bodies checked member by member. Integers are kept exactly, apart from other numbers.
public enum JSONValue: Codable, Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// The deepest a value decoded as part of a Codable type may sit, counted from the root of the
    /// document being decoded. Decoding tries each kind in turn, so its cost grows faster than the
    /// depth.
    public static let maxDecodingDepth = 64
    /// A decoder's `userInfo` key: how many levels above the document being decoded its root sits
    /// (1 for a payload decoded apart from its envelope), added to the depth counted.
    public static let depthAboveKey = CodingUserInfoKey(rawValue: "hub.jsonValue.depthAbove")!
    /// The deepest a value `parse` takes. JSONEncoder writes at most 512 levels, so what is parsed
    /// can always be written again, inside an envelope or an output line.
    public static let maxParseDepth = 256

    public init(from decoder: Decoder) throws {
        guard decoder.codingPath.count + (decoder.userInfo[JSONValue.depthAboveKey] as? Int ?? 0) <= JSONValue.maxDecodingDepth else {
            throw DecodingError.dataCorrupted(DecodingError.Context(
                codingPath: decoder.codingPath, debugDescription: "JSON nested more than \(JSONValue.maxDecodingDepth) deep"))
        }
        let container = try decoder.singleValueContainer()
        // Each kind is tried in turn: a failure means the value is of another kind.
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value):
            if value.rounded() == value, abs(value) < 1e15 {
                try container.encode(Int64(value))
            } else {
                try container.encode(value)
            }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The JSON text `data` holds (any value, not only an object or array), or nil when it is not JSON.
    /// Foundation's parser reads it in time linear in its size; nil too for a value nested deeper
    /// than `maxParseDepth`.
    public static func parse(_ data: Data) -> JSONValue? {
        // Parse or nil: nil means not JSON, as documented.
        guard let parsed = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) else { return nil }
        return JSONValue(parsed: parsed, depth: 0)
    }

    /// A value as JSONSerialization gives it. Booleans are NSNumbers of type char; a number is an
    /// integer when its value is whole and exact (every digit that fits in an Int64, as JSONDecoder
    /// reads one), else a Double. Long numbers come as NSDecimalNumber, read from their text.
    private init?(parsed: Any, depth: Int) {
        switch parsed {
        case is NSNull:
            self = .null
        case let text as String:
            self = .string(text)
        case let decimal as NSDecimalNumber:
            let text = decimal.stringValue
            if let integer = Int64(text) {
                self = .integer(integer)
            } else {
                self = JSONValue.whole(Double(text) ?? decimal.doubleValue)
            }
        case let number as NSNumber:
            switch String(cString: number.objCType) {
            case "c", "B": self = .bool(number.boolValue)
            case "d", "f": self = JSONValue.whole(number.doubleValue)
            case "Q" where number.uint64Value > UInt64(Int64.max): self = .number(number.doubleValue)
            default: self = .integer(number.int64Value)
            }
        case let items as [Any]:
            guard depth < JSONValue.maxParseDepth else { return nil }
            var values: [JSONValue] = []
            values.reserveCapacity(items.count)
            for item in items {
                guard let value = JSONValue(parsed: item, depth: depth + 1) else { return nil }
                values.append(value)
            }
            self = .array(values)
        case let members as [String: Any]:
            guard depth < JSONValue.maxParseDepth else { return nil }
            var values: [String: JSONValue] = [:]
            values.reserveCapacity(members.count)
            for (key, member) in members {
                guard let value = JSONValue(parsed: member, depth: depth + 1) else { return nil }
                values[key] = value
            }
            self = .object(values)
        default:
            return nil
        }
    }

    /// A Double that is whole and exact (below 2^53) as an integer, as JSONDecoder reads `1.0`.
    private static func whole(_ value: Double) -> JSONValue {
        if value.rounded() == value, abs(value) < 9_007_199_254_740_992 { return .integer(Int64(value)) }
        return .number(value)
    }

    /// The JSON text `text` holds, or nil when it is not JSON.
    public static func parse(_ text: String) -> JSONValue? {
        parse(Data(text.utf8))
    }

    /// Compact JSON text with unescaped slashes and keys sorted by their bytes, as the hub writes
    /// every JSON document, envelopes included.
    public func encoded() throws -> Data {
        try HubCodec.encoder.encode(self)
    }

    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// A string as it is, anything else as its JSON text: for messages and popups.
    public var plainText: String {
        if case .string(let value) = self { return value }
        // A parsed JSON value always encodes again.
        return (try? encoded()).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// A number of either kind, as a Double.
    public var doubleValue: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .number(let value): value
        default: nil
        }
    }

    /// An object's member; nil for a missing member or a value that is not an object.
    public subscript(key: String) -> JSONValue? {
        objectValue?[key]
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { $1 }))
    }
}
