import Foundation
import Tags
import Testing

/// Generated and mutated input for the tag-expression parser: it answers every input with an
/// expression or a `TagError` that says what is wrong, and never crashes or hangs. `make test`
/// runs a short pass; `make fuzz` sets NH_FUZZ_ITERATIONS for a long one, and NH_FUZZ_SEED
/// replays a run.
@Suite("Tag expression parser under fuzzing")
struct TagExpressionFuzzTests {
    static let iterations = Int(ProcessInfo.processInfo.environment["NH_FUZZ_ITERATIONS"] ?? "") ?? 20_000
    static let seed = UInt64(ProcessInfo.processInfo.environment["NH_FUZZ_SEED"] ?? "") ?? 0x5eed_0f_7a65

    static let seeds = [
        "World", "World && !Politics", "(A || B) && C", "$UserId:alice || $InstallationId:x", "a:b:c-d_e@f#g.h",
        "!(!(!a))", "A || B || C || D || E || F || G || H", "((World))", "x && (y || (z && !w))",
    ]
    static let tokens = ["(", ")", "&&", "||", "!", " ", "World", "a", "$UserId:", "$InstallationId:", "&", "|", "\u{0}", "é", "\"", "\\", "\t", "\n"]

    @Test("every input gets an expression or an error with a message; a parsed expression matches deterministically")
    func fuzz() {
        var random = SplitMix64(seed: Self.seed)
        var parsed = 0
        for index in 0..<Self.iterations {
            let text = random.input(index, tokens: Self.tokens, seeds: Self.seeds)
            do {
                let expression = try TagExpression.parse(text)
                parsed += 1
                let tags = Set((0..<random.below(6)).map { _ in ["World", "a", "b", "x", "y", "Politics", "$UserId:alice"][random.below(7)] })
                #expect(expression.matches(tags) == expression.matches(tags), "\(text)")
            } catch {
                #expect(!error.message.isEmpty, "an error without a message for \(text.debugDescription)")
            }
        }
        #expect(parsed > 0, "the generator reaches valid expressions too")
    }

    @Test("deep nesting and huge inputs are refused or parsed, never a stack overflow", arguments: [10, 1_000, 100_000])
    func deepNesting(depth: Int) {
        let text = String(repeating: "(", count: depth) + "World" + String(repeating: ")", count: depth)
        let notted = String(repeating: "!", count: depth) + "World"
        for input in [text, notted, String(repeating: "a||", count: depth) + "a"] {
            do {
                _ = try TagExpression.parse(input)
            } catch {
                #expect(!error.message.isEmpty)
            }
        }
    }
}

/// A small, fast, reproducible random source for fuzzing.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    mutating func below(_ bound: Int) -> Int { bound <= 0 ? 0 : Int(next() % UInt64(bound)) }

    /// The `index`th input, in turn: tokens strung together, a mutated seed, or random bytes.
    mutating func input(_ index: Int, tokens: [String], seeds: [String]) -> String {
        switch index % 3 {
        case 0: return (0..<below(24)).map { _ in tokens[below(tokens.count)] }.joined()
        case 1: return mutate(seeds[below(seeds.count)])
        default: return String(decoding: (0..<below(64)).map { _ in UInt8(truncatingIfNeeded: next()) }, as: UTF8.self)
        }
    }

    /// `text` with a few bytes flipped, inserted, deleted or duplicated.
    mutating func mutate(_ text: String) -> String {
        var bytes = Array(text.utf8)
        for _ in 0..<(1 + below(4)) {
            let at = below(bytes.count + 1)
            switch below(4) {
            case 0 where !bytes.isEmpty: bytes[min(at, bytes.count - 1)] ^= UInt8(1 << below(8))
            case 1: bytes.insert(UInt8(truncatingIfNeeded: next()), at: at)
            case 2 where !bytes.isEmpty: bytes.remove(at: min(at, bytes.count - 1))
            default: bytes.insert(contentsOf: bytes[..<min(at, bytes.count)], at: at)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
