import Foundation
import Testing

@testable import NHBench

/// The document `nh-bench --output` writes, from hand-made figures.
@Suite("Bench report")
struct BenchReportTests {
    static let machine = BenchMachine(
        cores: 2, date: Date(timeIntervalSince1970: 1_800_000_000), host: "bench-host", os: "Debian 12", memoryBytes: 1 << 34)

    static let results = [
        BenchResult(name: "raw PUSH/PULL", unit: "msg/s", count: 1_000, seconds: 0.5),
        BenchResult(name: "Bus PUSH/PULL", unit: "msg/s", count: 1_500, seconds: 0.5, baseline: "raw PUSH/PULL", note: "n"),
        BenchResult(name: "latency, p99", unit: "ms", count: 0, seconds: 0, baseline: "mqtt latency, p99", value: 2.25),
        BenchResult(name: "mqtt latency, p99", unit: "ms", count: 0, seconds: 0, value: 1.5),
        BenchResult(name: "skipped", unit: "msg/s", count: 0, seconds: 0, baseline: "not measured"),
    ]

    static func document() throws -> [String: Any] {
        let data = try BenchReport.document(
            results, settings: BenchSettings(messages: 1_000, roundTrips: 10, size: 200), machine: machine, arguments: ["--output", "f"])
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test("the machine: cores, the date in ISO 8601, host, os, memory")
    func machine() throws {
        let machine = try #require(try Self.document()["machine"] as? [String: Any])
        #expect(machine["cores"] as? Int == 2)
        #expect(machine["date"] as? String == "2027-01-15T08:00:00Z")
        #expect(machine["host"] as? String == "bench-host")
        #expect(machine["os"] as? String == "Debian 12")
        #expect((machine["memoryBytes"] as? NSNumber)?.int64Value == 1 << 34)
    }

    @Test("every figure in order, with its rate as printed and its ratio to a measured baseline")
    func results() throws {
        let document = try Self.document()
        let results = try #require(document["results"] as? [[String: Any]])
        #expect(results.map { $0["name"] as? String } == Self.results.map(\.name))
        #expect(results[0]["rate"] as? Double == 2_000)
        #expect(results[0]["unit"] as? String == "msg/s")
        #expect(results[0]["ratio"] == nil && results[0]["baseline"] == nil)
        #expect(results[1]["rate"] as? Double == 3_000)
        #expect(results[1]["baseline"] as? String == "raw PUSH/PULL")
        #expect(results[1]["ratio"] as? Double == 1.5)
        #expect(results[1]["note"] as? String == "n")
        #expect(results[2]["rate"] as? Double == 2.25)
        #expect(results[2]["ratio"] as? Double == 1.5)
        #expect(results[4]["baseline"] as? String == "not measured" && results[4]["ratio"] == nil)
        let settings = try #require(document["settings"] as? [String: Any])
        #expect(settings["messages"] as? Int == 1_000 && settings["size"] as? Int == 200)
        #expect(settings["arguments"] as? [String] == ["--output", "f"])
    }
}
