import Foundation
import Templates
import Testing

/// Generated and mutated templates and template expressions: each is compiled or refused with a
/// message, a compiled one renders with any properties, and nothing crashes. NH_FUZZ_ITERATIONS
/// and NH_FUZZ_SEED as for the tag-expression fuzzing.
@Suite("Template parser under fuzzing")
struct TemplateFuzzTests {
    static let iterations = Int(ProcessInfo.processInfo.environment["NH_FUZZ_ITERATIONS"] ?? "") ?? 20_000
    static let seed = UInt64(ProcessInfo.processInfo.environment["NH_FUZZ_SEED"] ?? "") ?? 0x7e_3a_1a7e

    static let seeds = [
        #"{"aps":{"alert":"$(messageParam)"}}"#, #"{"title":"$(title)","body":"{$(a) + ' ' + $(b)}"}"#,
        #"{"x":"{.(name, 10)}","y":"{%(p)}","z":"{#(q)}"}"#, #"{"m":"$(m)"}"#, "plain text", #"{"a":"{'lit' + $(b)}"}"#,
    ]
    static let tokens = ["$(", ")", "{", "}", "'", "+", ".(", "%(", "#(", ",", "name", "10", "\"", "\\", " ", "$", "é", "\u{0}"]

    @Test("every template is compiled or refused with a message, and a compiled one renders")
    func fuzz() {
        var random = SplitMix64(seed: Self.seed)
        var compiled = 0
        for index in 0..<Self.iterations {
            let text = random.input(index, tokens: Self.tokens, seeds: Self.seeds)
            let properties = ["messageParam": "hi", "title": String(repeating: "t", count: random.below(40)), "a": "\"", "name": "\\"]
            do {
                let template = try Template(text)
                compiled += 1
                _ = template.render(properties)
            } catch {
                #expect(!error.message.isEmpty, "an error without a message for \(text.debugDescription)")
            }
            do {
                let expression = try TemplateExpression.compile(text)
                _ = expression.renderText(properties)
            } catch {
                #expect(!error.message.isEmpty)
            }
        }
        #expect(compiled > 0, "the generator reaches valid templates too")
    }

    @Test("deep and huge templates are compiled or refused, never a stack overflow", arguments: [10, 1_000, 100_000])
    func deep(depth: Int) {
        for input in [
            String(repeating: "{", count: depth) + String(repeating: "}", count: depth),
            "{" + String(repeating: "'a' + ", count: depth) + "'b'}",
            String(repeating: "$(a)", count: depth),
        ] {
            do {
                _ = try Template(input).render(["a": "x"])
            } catch {
                #expect(!error.message.isEmpty)
            }
        }
    }
}
