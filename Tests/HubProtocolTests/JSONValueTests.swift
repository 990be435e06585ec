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
