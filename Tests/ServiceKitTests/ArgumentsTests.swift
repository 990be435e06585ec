import Foundation
@testable import ServiceKit
import Testing

@Suite("Arguments and logging")
struct ArgumentsTests {
    @Test("positionals, valued options in both forms, flags and --")
    func parse() throws {
        let parsed = try Arguments(
            ["send", "--config", "a.json", "--timeout=5", "--json", "x", "--", "--not-an-option"],
            valued: ["config", "timeout"], flags: ["json"])
        #expect(parsed.positionals == ["send", "x", "--not-an-option"])
        #expect(parsed[option: "config"] == "a.json")
        #expect(parsed[option: "timeout"] == "5")
        #expect(parsed.has("json"))
        #expect(!parsed.has("help"))
        #expect(try Arguments(["-h"], valued: [], flags: []).has("help"))
    }

    @Test("unknown options and missing values are errors that say what is known")
    func errors() {
        #expect(throws: Arguments.Error.self) { try Arguments(["--config"], valued: ["config"], flags: []) }
        #expect(throws: Arguments.Error.self) { try Arguments(["--json=1"], valued: [], flags: ["json"]) }
        do {
            _ = try Arguments(["--colour"], valued: ["config"], flags: ["json"])
            Issue.record("should fail")
        } catch {
            #expect(error.description.contains("--colour"))
            #expect(error.description.contains("--config VALUE"))
        }
    }

    @Test("log lines are logfmt, quoted where needed, and filtered by level")
    func logging() {
        #expect(Logger.quote("plain") == "plain")
        #expect(Logger.quote("two words") == "\"two words\"")
        #expect(Logger.quote("a\"b\nc") == "\"a\\\"b\\nc\"")
        let lines = LineBox()
        let logger = Logger(service: "nh-test", level: .info, sink: { lines.append($0) })
        logger.debug("hidden")
        logger.warning("shown", ("key", "a b"), ("n", 3))
        let captured = lines.all
        #expect(captured.count == 1)
        #expect(captured[0].contains("level=warning service=nh-test msg=shown key=\"a b\" n=3"))
        #expect(Logger.Level(name: "ERROR") == .error)
        #expect(Logger.Level(name: "loud") == nil)
    }

    @Test("a rate limiter allows bursts of twice the rate, then the rate, per key")
    func rateLimiter() {
        let limiter = RateLimiter(perSecond: 10)
        let start: TimeInterval = 1_000
        var allowed = 0
        for _ in 0..<100 where limiter.allow("k", now: start) { allowed += 1 }
        #expect(allowed == 20)
        #expect(limiter.allow("other", now: start), "keys have buckets of their own")
        #expect(!limiter.allow("k", now: start + 0.05))
        #expect(limiter.allow("k", now: start + 0.1), "a tenth of a second brings one token back")
        allowed = 0
        for _ in 0..<100 where limiter.allow("k", now: start + 10) { allowed += 1 }
        #expect(allowed == 20, "a quiet key refills up to the burst, not beyond")
    }
}
