import Foundation
import Testing

@testable import NHBench

/// Figures measured in rounds, and the Python helpers' ready lines.
@Suite("Bench rounds")
struct RoundsTests {
    @Test("the median: the middle value, the mean of the two middle ones, none of nothing")
    func median() {
        #expect([3.0, 1.0, 2.0].median == 2.0)
        #expect([0.5].median == 0.5)
        #expect([4.0, 1.0, 3.0, 2.0].median == 2.5)
        #expect([Double]().median == nil)
    }

    @Test("rounds give the median round's rate and every round's time; a failed round gives no rate")
    func rounds() {
        var rounds = Rounds()
        rounds.add(Result<Double, BenchError>.success(2.0), round: 1)
        rounds.add(Result<Double, BenchError>.success(0.5), round: 2)
        rounds.add(Result<Double, BenchError>.success(1.0), round: 3)
        let result = rounds.result(name: "accepts", unit: "send/s", count: 1_000, baseline: "raw", note: "4 backends")
        #expect(result.rate == 1_000)
        #expect(result.baseline == "raw")
        #expect(result.note == "median of 3 (2.00, 0.50, 1.00 s); 4 backends")

        rounds.add(Result<Double, BenchError>.failure(BenchError("12 of 1000 sends accepted")), round: 4)
        let failed = rounds.result(name: "accepts", unit: "send/s", count: 1_000, note: "4 backends")
        #expect(failed.rate == 0)
        #expect(failed.note == "round 4: 12 of 1000 sends accepted")
    }

    @Test("the helper is ready at a whole line it accepts, not at part of one")
    func readyLine() {
        let url = { (line: Substring) in line.hasPrefix("postgresql://") }
        #expect(ChildScript.firstLine(in: "postgresql:///nh?host=/tmp/x", where: url) == nil)
        #expect(ChildScript.firstLine(in: "starting\npostgresql:///nh?host=/tmp/x&port=5\n", where: url) == "postgresql:///nh?host=/tmp/x&port=5")
        #expect(ChildScript.firstLine(in: "ready\n", where: { $0 == "ready" }) == "ready")
        #expect(ChildScript.firstLine(in: "", where: url) == nil)
    }
}
