import Foundation
import Testing

@testable import NHBench

/// The pieces of the sharded fan-out figures that need no services: CPU time from /proc/PID/stat,
/// the cost per 1,000 deliveries, and the figures made from two rounds.
@Suite("Sharded fan-out")
struct FanoutShardsTests {
    /// A /proc/PID/stat line as Linux writes it, with utime 1234 and stime 567.
    static func stat(comm: String) -> String {
        "4242 (\(comm)) S 1 4242 4242 0 -1 4194560 2890 0 0 0 1234 567 0 0 20 0 5 0 123456 812345344 5123 18446744073709551615 1 1 0 0 0 0 0 4096 17 1 0 0 0 0 0\n"
    }

    @Test("utime and stime are fields 14 and 15, counted after the command name", arguments: [
        "nh-dispatch", "a b c", "x) S 9 9 (y", "(", ")",
    ])
    func ticks(comm: String) throws {
        let ticks = try #require(ProcessCPU.ticks(stat: Self.stat(comm: comm)))
        #expect(ticks.user == 1234)
        #expect(ticks.system == 567)
    }

    @Test("a line cut short, or without its command name, gives no time")
    func malformed() {
        #expect(ProcessCPU.ticks(stat: "4242 nh-dispatch S 1 2 3") == nil)
        #expect(ProcessCPU.ticks(stat: "4242 (nh-dispatch) S 1 4242 4242 0 -1 4194560 2890 0 0 0 1234") == nil)
        #expect(ProcessCPU.ticks(stat: "4242 (nh-dispatch) S 1 4242 4242 0 -1 4194560 2890 0 0 0 x 567 0") == nil)
    }

    @Test("this process's own time can be read and does not go back")
    func ownProcess() throws {
        let first = try #require(ProcessCPU.seconds(getpid()))
        var spin = 0
        for index in 0..<2_000_000 { spin &+= index }
        #expect(spin != 0)
        let second = try #require(ProcessCPU.seconds(getpid()))
        #expect(first >= 0 && second >= first)
        #expect(ProcessCPU.seconds(-1) == nil)
    }

    @Test("CPU seconds per 1,000: the seconds over the count in thousands; nothing counted, no figure")
    func perThousand() {
        #expect(ProcessCPU.perThousand(cpuSeconds: 3, count: 100_000) == 0.03)
        #expect(ProcessCPU.perThousand(cpuSeconds: 1.5, count: 500) == 3)
        #expect(ProcessCPU.perThousand(cpuSeconds: 1, count: 0) == nil)
    }

    static func round(_ dispatchers: Int, cpu: [Double], acked: [Int], shards: [Int], seconds: Double = 2) -> FanoutShardsBench.Round {
        FanoutShardsBench.Round(dispatchers: dispatchers, expected: 100_000, seconds: seconds, cpuSeconds: cpu, acked: acked, shards: shards)
    }

    @Test("three rounds make eight figures: each rate, each CPU cost (PostgreSQL beside SQLite, two dispatchers beside one), then 8 and 16 on paper")
    func figures() throws {
        let sqlite = Self.round(1, cpu: [3], acked: [100_000], shards: [0], seconds: 2)
        let one = Self.round(1, cpu: [4], acked: [100_000], shards: [64], seconds: 4)
        let two = Self.round(2, cpu: [2.5, 2], acked: [49_000, 51_000], shards: [32, 32])
        let results = FanoutShardsBench.results(n: 10_000, broadcasts: 10, sqlite: .success(sqlite), one: .success(one), two: .success(two))
        #expect(results.map(\.name) == [
            "fan-out 10,000 on SQLite, 1 dispatcher", "fan-out 10,000 on PostgreSQL, 1 dispatcher", "fan-out 10,000 on PostgreSQL, 2 dispatchers",
            "CPU s per 1,000 acked, 1 dispatcher on SQLite", "CPU s per 1,000 acked, 1 dispatcher", "CPU s per 1,000 acked, 2 dispatchers, summed",
            "projected: 8 dispatchers, a core each", "projected: 16 dispatchers, a core each",
        ])
        #expect(results[0].rate == 50_000 && results[0].baseline == nil)
        #expect(results[1].rate == 25_000 && results[1].baseline == results[0].name)
        #expect(results[2].rate == 50_000 && results[2].baseline == results[1].name)
        let rates = BenchReport.rates(results)
        #expect(BenchReport.ratio(results[1], rates: rates) == 0.5)
        #expect(try #require(results[1].note).contains("goal ≥ 0.8× one on SQLite"))
        #expect(results[3].value == 0.03 && results[3].baseline == nil)
        #expect(results[4].value == 0.04 && results[4].baseline == results[3].name)
        #expect(results[5].value == 0.045 && results[5].baseline == results[4].name)
        let ratio = try #require(BenchReport.ratio(results[5], rates: rates))
        #expect(abs(ratio - 1.125) < 1e-9)
        let note = try #require(results[5].note)
        #expect(note.contains("≤ 1.1×"))
        #expect(note.contains("#1 32 shards, 49.0% of acks, 2.50 CPU s; #2 32 shards, 51.0% of acks, 2.00 CPU s"))
        // On paper: one 0.04 s per 1,000, two 0.045 summed: each repeats 0.005, and 0.035 is split.
        #expect(abs((results[6].value ?? 0) - 1_000 / (0.005 + 0.035 / 8)) < 1e-6)
        #expect(abs((results[7].value ?? 0) - 1_000 / (0.005 + 0.035 / 16)) < 1e-6)
    }

    @Test("the projection: what two add is repeated by each, the rest split; two no dearer than one split it all; nothing split, nothing projected")
    func projection() throws {
        #expect(FanoutShardsBench.projectedRate(one: 0.04, two: 0.04, dispatchers: 8) == 1_000 / 0.005)
        #expect(FanoutShardsBench.projectedRate(one: 0.04, two: 0.038, dispatchers: 2) == 1_000 / 0.02)
        #expect(FanoutShardsBench.projectedRate(one: 0.04, two: 0.08, dispatchers: 8) == nil)
        let eight = try #require(FanoutShardsBench.projectedRate(one: 0.039, two: 0.045, dispatchers: 8))
        let sixteen = try #require(FanoutShardsBench.projectedRate(one: 0.039, two: 0.045, dispatchers: 16))
        #expect(eight > 1_000 / 0.039 && sixteen > eight && sixteen < 1_000 / 0.006)
    }

    @Test("a round that failed gives no rate and no CPU figure, and says why")
    func failedRound() {
        let one = Self.round(1, cpu: [4], acked: [100_000], shards: [64])
        let results = FanoutShardsBench.results(
            n: 2_000, broadcasts: 10, sqlite: .failure(BenchError("no SQLite")), one: .success(one),
            two: .failure(BenchError("not all 2000 agents connected")))
        #expect(results[0].rate == 0 && results[0].note == "no SQLite")
        #expect(results[2].rate == 0 && results[2].note == "not all 2000 agents connected")
        #expect(results.map(\.name).contains("CPU s per 1,000 acked, 1 dispatcher on SQLite") == false)
        #expect(results[4].value == nil && results[4].rate == 0 && results[4].note == "not measured")
        #expect(!results.contains { $0.name.hasPrefix("projected") })
    }
}

/// The CPU per delivery of the fan-out figures: the long run's CPU less the short run's, over
/// the deliveries between them, so that what each run costs whatever its length drops out.
@Suite("CPU per delivery")
struct CPUPerDeliveryTests {
    @Test("the difference of cost over the difference of deliveries")
    func difference() throws {
        // 2 broadcasts to 10,000 in 1.9 s, 10 in 7.9 s: 6 s for 80,000 deliveries, 75 µs each,
        // though each run alone (0.95 s and 0.79 s per 10,000) would say otherwise.
        let value = try #require(ProcessCPU.perDelivery(short: (1.9, 20_000), long: (7.9, 100_000)))
        #expect(abs(value * 1e6 - 75) < 1e-6)
    }

    @Test("no figure without more deliveries in the long run, or with less CPU in it")
    func unmeasured() {
        #expect(ProcessCPU.perDelivery(short: (1, 100), long: (2, 100)) == nil)
        #expect(ProcessCPU.perDelivery(short: (1, 100), long: (2, 50)) == nil)
        #expect(ProcessCPU.perDelivery(short: (3, 100), long: (2, 200)) == nil)
        #expect(ProcessCPU.perDelivery(short: (0, 0), long: (0, 100)) == 0)
    }

    @Test("the hub's figure names Mosquitto's as its reference, and says when a run did not finish")
    func figures() {
        let unfinished = FanoutBench.costPerDelivery(agents: 1_000, short: FanoutBench.Round(), main: FanoutBench.Round())
        #expect(unfinished.value == nil)
        #expect(unfinished.baseline == MosquittoFanout.cpuName(n: 1_000, qos: 1))
        let short = FanoutBench.Round(reachedSeconds: 1, ackedSeconds: 1, cost: 0.5, deliveries: 2_000)
        let main = FanoutBench.Round(reachedSeconds: 4, ackedSeconds: 4, cost: 1.3, deliveries: 10_000)
        let figure = FanoutBench.costPerDelivery(agents: 1_000, short: short, main: main)
        #expect(abs((figure.value ?? 0) - 100) < 1e-6)
        #expect(figure.unit == "µs")
        #expect(figure.note?.contains("10000 − 2000 deliveries: 1.30 − 0.50") == true)
    }

    @Test("callgrind's dumps give their instruction totals; a dump without them gives none")
    func callgrindTotals() {
        let dump = "version: 1\ncreator: callgrind-3.19.0\npid: 4242\nevents: Ir\nsummary: 123456\n\nfn=(1) main\n0 10\ntotals: 123456\n"
        #expect(Callgrind.totalInstructions(dump) == 123_456)
        #expect(Callgrind.totalInstructions("events: Ir\nsummary: 77 3\n") == 77)
        #expect(Callgrind.totalInstructions("events: Ir\nfn=(1) main\n0 10\n") == nil)
    }

    @Test("the instruction figure has no reference and names callgrind in its note")
    func instructionFigure() throws {
        let callgrind = try Callgrind()
        defer { callgrind.remove() }
        var meter = FanoutBench.Meter.cpu
        meter.name = FanoutBench.instructionsName
        meter.unit = "instr"
        meter.scale = 1
        meter.baseline = { _ in nil }
        meter.what = "all threads, instructions (callgrind Ir)"
        meter.decimals = 0
        let short = FanoutBench.Round(cost: 4_000_000, deliveries: 400)
        let main = FanoutBench.Round(cost: 12_000_000, deliveries: 2_000)
        let figure = FanoutBench.costPerDelivery(agents: 200, short: short, main: main, meter: meter)
        #expect(figure.value == 5_000)
        #expect(figure.baseline == nil)
        #expect(figure.name == "fan-out N=200: dispatcher instructions per acknowledged delivery")
    }
}

/// What connecting N agents took, in parts, and the machine's accept-queue drops.
@Suite("Connect figure")
struct ConnectFigureTests {
    @Test("the note gives the dropped connections and bare libzmq's time, each only when known")
    func note() {
        let alone = CurveConnectBench.Outcome(seconds: 6.5, echoed: 10_000, overflows: 3)
        #expect(FanoutBench.connectNote(overflows: 1_779, alone: alone)
            == "CURVE handshake, ZAP, hello, welcome; 1,779 connections dropped by a full accept queue and retried; libzmq CURVE alone: 6.50 s")
        #expect(FanoutBench.connectNote(overflows: nil, alone: nil) == "CURVE handshake, ZAP, hello, welcome")
        #expect(FanoutBench.connectNote(overflows: 0, alone: nil, dispatcherCPU: 4.25)
            == "CURVE handshake, ZAP, hello, welcome; 0 connections dropped by a full accept queue and retried; dispatcher CPU 4.25 s")
    }

    @Test("the handshakes' arithmetic: 12 operations a connection, 6 of them the server's, spread over the cores")
    func arithmeticFloor() {
        let outcome = CurveConnectBench.Outcome(seconds: 5.3, echoed: 10_000, overflows: 2, serverCPU: 4.9, clientCPU: 5.25)
        let results = CurveConnectBench.results(n: 10_000, outcome: outcome, operationSeconds: 40e-6, cores: 2)
        #expect(results.map(\.name) == [CurveConnectBench.name(n: 10_000), CurveConnectBench.floorName(n: 10_000)])
        #expect(results[0].value == 5.3)
        #expect((results[0].note ?? "").hasSuffix("2 connections dropped by a full accept queue and retried; CPU s: server 4.90, clients 5.25"))
        // 10,000 × 12 × 40 µs = 4.8 CPU s, on 2 cores 2.4 s; the server's 6 a connection, 1.2 s.
        #expect(abs((results[1].value ?? 0) - 2.4) < 1e-9)
        #expect((results[1].note ?? "").contains("at 40.0 µs each") && (results[1].note ?? "").hasSuffix("the server's alone: 1.20 s"))
        #expect(abs(CurveConnectBench.arithmeticSeconds(operations: 120_000, seconds: 40e-6, cores: 1) - 4.8) < 1e-9)
        // Without a timed operation, only the connect figure; a machine that reports no cores counts as one.
        #expect(CurveConnectBench.results(n: 10, outcome: outcome, operationSeconds: nil, cores: 2).count == 1)
        #expect(CurveConnectBench.arithmeticSeconds(operations: 10, seconds: 1, cores: 0) == 10)
    }

    @Test("one curve25519 operation is timed through libzmq")
    func operationTimed() throws {
        #expect(try CurveConnectBench.operationSeconds(count: 50) > 0)
    }

    @Test("the kernel's count of connections dropped for a full accept queue is read, and does not go back")
    func listenOverflows() throws {
        let first = try #require(CurveConnectBench.listenOverflows())
        let second = try #require(CurveConnectBench.listenOverflows())
        #expect(first >= 0 && second >= first)
    }
}
