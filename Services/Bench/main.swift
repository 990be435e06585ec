import Foundation
import ServiceKit

#if canImport(Glibc)
import Glibc
#endif

let usage = """
    nh-bench: throughput of the hub's bus beside raw libzmq and Mosquitto, measured in one run

    Usage: nh-bench [--messages N] [--round-trips N] [--size BYTES] [--sends N] [--posts N] [--dismisses N]
                    [--no-mosquitto] [--no-services] [--json]

    The service figures start the real executables from nh-bench's own folder on free loopback ports.
    """

do {
    if CommandLine.arguments.dropFirst().first == "fleet" {
        let parsed = try Arguments(Array(CommandLine.arguments.dropFirst(2)), valued: ["count", "prefix", "tag", "heartbeat-ms"], flags: [])
        var options = AgentFleet.Options()
        options.count = parsed[option: "count"].flatMap(Int.init) ?? options.count
        options.prefix = parsed[option: "prefix"] ?? options.prefix
        options.tag = parsed[option: "tag"] ?? options.tag
        options.heartbeatMs = parsed[option: "heartbeat-ms"].flatMap(Int.init) ?? options.heartbeatMs
        try AgentFleet.run(options)
        exit(0)
    }
    let parsed = try Arguments(
        Array(CommandLine.arguments.dropFirst()), valued: ["messages", "round-trips", "size", "posts", "dismisses", "sends", "fanout", "broadcasts", "latency-sends", "rate"],
        flags: ["no-mosquitto", "no-services", "no-fanout", "only-fanout", "json"])
    if parsed.has("help") {
        print(usage)
        exit(0)
    }
    let settings = BenchSettings(
        messages: parsed[option: "messages"].flatMap(Int.init) ?? 500_000,
        roundTrips: parsed[option: "round-trips"].flatMap(Int.init) ?? 20_000,
        size: parsed[option: "size"].flatMap(Int.init) ?? 200)
    var results: [BenchResult] = []
    let fanoutSizes = (parsed[option: "fanout"] ?? "1000,10000").split(separator: ",").compactMap { Int($0) }
    if parsed.has("only-fanout") {
        results.append(try RawZMQBench.pushPull(settings))
        for agents in fanoutSizes {
            results += try FanoutBench.run(
                agents: agents, broadcasts: parsed[option: "broadcasts"].flatMap(Int.init) ?? 10,
                latencySends: parsed[option: "latency-sends"].flatMap(Int.init) ?? 3_000, rate: parsed[option: "rate"].flatMap(Int.init) ?? 1_000)
        }
        BenchReport.print(results, settings: settings, json: parsed.has("json"))
        exit(0)
    }
    results.append(try RawZMQBench.pushPull(settings))
    results.append(try BusBench.pushPull(settings))
    results.append(try BusBench.sequencedPubSub(settings))
    results.append(try RawZMQBench.requestReply(settings))
    results.append(try BusBench.requestReply(settings))
    results.append(try BusBench.hubProtocolRequests(settings))
    results.append(try CodecBench.userPost(settings.roundTrips))
    results += try CodecBench.agentDelivery(settings.roundTrips)
    if !parsed.has("no-mosquitto") {
        results.append(MosquittoBench.publishSubscribe(settings))
    }
    if !parsed.has("no-services") {
        results += try BreakingNewsBench.run(sends: parsed[option: "sends"].flatMap(Int.init) ?? 1_000)
        results += try UserSyncBench.run(
            posts: parsed[option: "posts"].flatMap(Int.init) ?? 1_000, dismisses: parsed[option: "dismisses"].flatMap(Int.init) ?? 1_000)
    }
    BenchReport.print(results, settings: settings, json: parsed.has("json"))
} catch {
    FileHandle.standardError.write(Data("nh-bench: \(error)\n".utf8))
    exit(2)
}
