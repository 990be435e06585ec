/// One D-Bus value, as marshalled in a message's body. Containers carry the signatures that an
/// empty one could not show: an array its element's, a dictionary entry its key's and value's.
public indirect enum DBusValue: Equatable, Sendable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    /// A byte array, `ay`, such as a push message; read and written in one piece.
    case bytes([UInt8])
    /// An array whose elements have the signature `element`.
    case array(element: String, [DBusValue])
    /// One entry of a dictionary (an array of entries, `a{..}`).
    case entry(DBusValue, DBusValue)
    case variant(DBusValue)
    case structure([DBusValue])

    /// The value's D-Bus type signature.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .bytes: "ay"
        case .array(let element, _): "a" + element
        case .entry(let key, let value): "{" + key.signature + value.signature + "}"
        case .variant: "v"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        }
    }

    /// A dictionary of string keys to variants, `a{sv}`, as hints and properties are sent.
    public static func stringVariants(_ pairs: [(String, DBusValue)]) -> DBusValue {
        .array(element: "{sv}", pairs.map { .entry(.string($0.0), .variant($0.1)) })
    }

    public static func strings(_ values: [String]) -> DBusValue {
        .array(element: "s", values.map { .string($0) })
    }

    public var string: String? {
        switch self {
        case .string(let value), .objectPath(let value), .signature(let value): value
        case .variant(let inner): inner.string
        default: nil
        }
    }

    public var uint32: UInt32? {
        switch self {
        case .uint32(let value): value
        case .variant(let inner): inner.uint32
        default: nil
        }
    }

    /// The bytes of an `ay` array.
    public var bytes: [UInt8]? {
        switch self {
        case .bytes(let value): value
        case .variant(let inner): inner.bytes
        default: nil
        }
    }

    /// The value under `key` in an `a{sv}` dictionary, without its variant.
    public subscript(key: String) -> DBusValue? {
        guard case .array(_, let entries) = self else { return nil }
        for case .entry(.string(key), let value) in entries {
            if case .variant(let inner) = value { return inner }
            return value
        }
        return nil
    }

    /// The strings of an `as` array.
    public var strings: [String]? {
        guard case .array(_, let elements) = self else { return nil }
        let strings = elements.compactMap(\.string)
        return strings.count == elements.count ? strings : nil
    }
}
