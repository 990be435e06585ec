import Foundation
import Templates
import Testing

@Suite("Templates")
struct TemplateTests {
    func render(_ body: String, _ properties: [String: String]) throws -> String {
        try Template(body).render(properties)
    }

    @Test("the seed's template: $(messageParam) fills the alert")
    func seed() throws {
        #expect(try render(#"{"aps":{"alert":"$(messageParam)"}}"#, ["messageParam": "Breaking Sports News!"])
            == #"{"aps":{"alert":"Breaking Sports News!"}}"#)
    }

    @Test("each form of expression", arguments: [
        (#"{"a":"$(p)"}"#, ["p": "x"], #"{"a":"x"}"#),
        (#"{"a":"$(missing)"}"#, [:], #"{"a":""}"#),
        (#"{"a":"$(p,3)"}"#, ["p": "abcdef"], #"{"a":"abc"}"#),
        (#"{"a":"$(p, 10)"}"#, ["p": "abc"], #"{"a":"abc"}"#),
        (#"{"a":".(p, 3)"}"#, ["p": "abcdef"], #"{"a":"abc…"}"#),
        (#"{"a":"%(p)"}"#, ["p": "a b&c/d"], #"{"a":"a%20b%26c%2Fd"}"#),
        (##"{"n":"#(count)"}"##, ["count": "42"], ##"{"n":42}"##),
        (##"{"n":"#(ratio)"}"##, ["ratio": "0.5"], ##"{"n":0.5}"##),
        (##"{"n":"#(count)"}"##, ["count": "many"], ##"{"n":null}"##),
        (#"{"a":"{'Score: ' + $(score) + \"!\"}"}"#, ["score": "3"], #"{"a":"Score: 3!"}"#),
        (#"{"a":"Hi $(name), see %(url)"}"#, ["name": "Ann", "url": "a b"], #"{"a":"Hi Ann, see a%20b"}"#),
        (#"{"a":"$(PROP)"}"#, ["prop": "case"], #"{"a":"case"}"#),
        (#"{"a":"$(prop)"}"#, ["Prop": "case"], #"{"a":"case"}"#),
        (#"{"list":["$(a)",1,true,null],"plain":"end.(see)"}"#, ["a": "q\"uote"], #"{"list":["q\"uote",1,true,null],"plain":"end.(see)"}"#),
    ])
    func forms(body: String, properties: [String: String], expected: String) throws {
        #expect(try render(body, properties) == expected)
    }

    @Test("rendered output is valid JSON even with quotes and newlines in properties")
    func escaping() throws {
        let output = try render(#"{"a":"$(p)"}"#, ["p": "line1\n\"two\"\\ \u{1}"])
        let parsed = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: String]
        #expect(parsed?["a"] == "line1\n\"two\"\\ \u{1}")
    }

    @Test("bad templates are refused with the reason", arguments: [
        (#"{"a":"$(p)""#, "not valid JSON"),
        (#"{"a":"$(p"}"#, "never closed"),
        (#"{"a":"$()"}"#, "names no property"),
        (#"{"a":"$(p, x)"}"#, "positive integer"),
        (#"{"a":"$(p, 0)"}"#, "positive integer"),
        (#"{"a":"count: #(n)"}"#, "whole value"),
        (#"{"a":"{'x' $(p)}"}"#, "join the parts"),
        (#"{"a":"{'x' + }"}"#, "ends with +"),
        (#"{"a":"{'x}"}"#, "never closed"),
        (#"{"a":"{}"}"#, "empty"),
        (#"{"a":{"b":["ok","%(p, 2)"]}}"#, "at a.b[1]"),
    ])
    func refused(body: String, reason: String) {
        do {
            _ = try Template(body)
            Issue.record("\(body) should be refused")
        } catch {
            #expect(error.message.contains(reason), "\(error.message)")
        }
    }

    @Test("a single expression renders as text, for expiry expressions")
    func expression() throws {
        let expiry = try TemplateExpression.compile("$(expiry)")
        #expect(expiry.renderText(["expiry": "2026-12-31T00:00:00Z"]) == "2026-12-31T00:00:00Z")
        #expect(expiry.properties == ["expiry"])
        #expect(try TemplateExpression.compile("plain").isLiteral)
    }

    @Test("a Windows template is XML: expressions in text and attributes, property values escaped")
    func xml() throws {
        let body = #"<toast launch="$(link)"><visual><binding template="ToastText01"><text id="1">.(message, 8)</text></binding></visual></toast>"#
        let template = try Template(body, markup: Template.markup(platform: "WNS", headers: ["X-WNS-Type": "wns/toast"]))
        #expect(template.render(["Link": #"a"b&c"#, "message": "<b>Breaking</b> news"])
            == #"<toast launch="a&quot;b&amp;c"><visual><binding template="ToastText01"><text id="1">&lt;b&gt;Break…</text></binding></visual></toast>"#)
        let raw = try Template("id=$(id)&v=<x>", markup: Template.markup(platform: "wns", headers: ["x-wns-type": "wns/raw"]))
        #expect(raw.render(["id": "<7>"]) == "id=<7>&v=<x>")
        #expect(Template.markup(platform: "apns", headers: nil) == .json)
        #expect(throws: TemplateError.self) { try Template(#"{"not":"xml"}"#, markup: .xml) }
        #expect(throws: TemplateError.self) { try Template("<toast>$(open</toast>", markup: .xml) }
    }
}
