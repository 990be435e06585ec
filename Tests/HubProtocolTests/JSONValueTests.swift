import Foundation
import HubProtocol
import Testing

/// The one model for open-shaped JSON: request bodies, payloads shown by the agent, push services' answers.
@Suite("JSONValue")
struct JSONValueTests {
    @Test("integers keep every digit; other numbers stay numbers")
    func integersAreExact() throws {
        let value = try #require(JSONValue.parse(#"{"big": 9007199254740993, "small": -3, "ratio": 1.5}"#))
        #expect(value["big"] == .integer(9_007_199_254_740_993), "2^53 + 1 does not survive a Double")
        #expect(value["small"] == .integer(-3))
        #expect(value["ratio"] == .number(1.5))
        #expect(String(decoding: try value.encoded(), as: UTF8.self) == #"{"big":9007199254740993,"ratio":1.5,"small":-3}"#)
        #expect(value["ratio"]?.doubleValue == 1.5)
        #expect(value["big"]?.doubleValue == 9_007_199_254_740_992)
    }

    @Test("any JSON text parses, including a bare string or number; anything else is nil")
    func fragments() {
        #expect(JSONValue.parse(#""hi""#) == .string("hi"))
        #expect(JSONValue.parse("42") == .integer(42))
        #expect(JSONValue.parse("true") == .bool(true))
        #expect(JSONValue.parse("null") == .null)
        #expect(JSONValue.parse("[1, \"a\"]") == [1, "a"])
        #expect(JSONValue.parse("plain words") == nil)
        #expect(JSONValue.parse("{\"a\": ") == nil)
        #expect(JSONValue.parse("['a']") == nil, "single quotes are not JSON")
    }

    @Test("written with sorted keys and slashes as they are")
    func encoding() throws {
        let value: JSONValue = ["z": "https://push.example/a", "a": [true, nil_()], "m": ["k": 2.25]]
        #expect(String(decoding: try value.encoded(), as: UTF8.self) == #"{"a":[true,null],"m":{"k":2.25},"z":"https://push.example/a"}"#)
        #expect(JSONValue.parse(try value.encoded()) == value)
    }

    @Test("members and plain text")
    func access() {
        let value: JSONValue = ["aps": ["alert": "Hi"], "n": 3, "list": ["x"]]
        #expect(value["aps"]?["alert"]?.stringValue == "Hi")
        #expect(value["missing"] == nil)
        #expect(value["n"]?["deeper"] == nil, "a member of a number is nil")
        #expect(value["list"]?.arrayValue == ["x"])
        #expect(value["aps"]?.objectValue?.keys.sorted() == ["alert"])
        #expect(JSONValue.string("as is").plainText == "as is")
        #expect(JSONValue.integer(7).plainText == "7")
        #expect(value["aps"]?.plainText == #"{"alert":"Hi"}"#)
    }

    private func nil_() -> JSONValue { .null }
}

@Suite("JSONValue nesting")
struct JSONValueNestingTests {
    static func nested(_ depth: Int) -> String {
        #"{"a":"# + String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth) + "}"
    }

    @Test("parse takes nesting to its limit and refuses deeper, in one pass")
    func parseDepth() {
        #expect(JSONValue.parse(Self.nested(255)) != nil)
        #expect(JSONValue.parse(Self.nested(500)) == nil, "deeper than maxParseDepth")
        #expect(JSONValue.parse(Self.nested(5_000)) == nil, "deeper than Foundation's parser takes")
        var value = JSONValue.parse(Self.nested(255))?["a"]
        var depth = 0
        while case .array(let items)? = value {
            value = items.first
            depth += 1
        }
        #expect(depth == 255)
        #expect(value == .integer(1))
    }

    @Test("as a member of a Codable type, a value nested deeper than the limit is refused rather than decoded")
    func decodingDepth() throws {
        struct Holder: Decodable { var value: JSONValue }
        let shallow = #"{"value":"# + String(repeating: "[", count: 40) + String(repeating: "]", count: 40) + "}"
        #expect(throws: Never.self) { _ = try JSONDecoder().decode(Holder.self, from: Data(shallow.utf8)) }
        let deep = #"{"value":"# + String(repeating: "[", count: 400) + String(repeating: "]", count: 400) + "}"
        #expect(throws: DecodingError.self) { _ = try JSONDecoder().decode(Holder.self, from: Data(deep.utf8)) }
    }

    @Test("numbers as Foundation's parser gives them: booleans, exact integers, doubles, integers past Int64")
    func numbers() throws {
        #expect(JSONValue.parse("[true, false, 0, 1, -9007199254740993, 2.5, 1e3, 18446744073709551615]") == [
            true, false, 0, 1, .integer(-9_007_199_254_740_993), 2.5, .integer(1_000), .number(18_446_744_073_709_551_615),
        ])
        // Long numbers come from Foundation's parser as decimals; they are read from their text.
        #expect(JSONValue.parse("-1000000000000000000") == .integer(-1_000_000_000_000_000_000))
        #expect(JSONValue.parse("0.123456789012345678") == .number(0.123456789012345678))
        #expect(JSONValue.parse("1.0") == .integer(1), "a whole number reads as JSONDecoder reads it")
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data("1.0".utf8)) == .integer(1))
    }

    @Test("keys are written in byte order, as the hub writes every JSON document")
    func keyOrder() throws {
        let value = try #require(JSONValue.parse(#"{"b":1,"B":2,"a9":3,"a10":4}"#))
        #expect(String(decoding: try value.encoded(), as: UTF8.self) == #"{"B":2,"a10":4,"a9":3,"b":1}"#)
    }

    @Test("what parse takes can always be written again, inside an envelope or a line")
    func parsedIsWritable() throws {
        let deepest = JSONValue.parse(Self.nested(JSONValue.maxParseDepth - 1))
        let tooDeep = JSONValue.parse(Self.nested(JSONValue.maxParseDepth))
        #expect(tooDeep == nil)
        let wrapped: JSONValue = ["line": ["payload": try #require(deepest)]]
        #expect(throws: Never.self) { _ = try wrapped.encoded() }
    }
}
