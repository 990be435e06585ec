import Foundation
import ServiceKit

#if canImport(Glibc)
import Glibc
#endif

let usage = """
    nh-bench: throughput of the hub's bus beside raw libzmq and Mosquitto, measured in one run

    Usage: nh-bench [--messages N] [--round-trips N] [--size BYTES] [--sends N] [--posts N] [--dismisses N]
                    [--no-mosquitto] [--no-services] [--fanout N,N...] [--json]
           nh-bench fanout-mqtt [--fanout N,N...] [--broadcasts B] [--rate MSG/S] [--latency-count C] [--json]

    The service figures start the real executables from nh-bench's own folder on free loopback ports.
    --fanout adds the Mosquitto fan-out reference at each N: B broadcasts (default 10) at QoS 1 and at
    QoS 0, and QoS 1 latency at a fixed rate (default 1,000 msg/s, 5,000 messages); `fanout-mqtt` runs
    only that, at N = 1,000 and 10,000 unless --fanout says otherwise.
    """

/// The Mosquitto fan-out figures at each N: throughput at QoS 1 and QoS 0, then QoS 1 latency.
func mosquittoFanout(_ parsed: Arguments, sizes: [Int]) -> [BenchResult] {
    let broadcasts = parsed[option: "broadcasts"].flatMap(Int.init) ?? 10
    let rate = parsed[option: "rate"].flatMap(Int.init) ?? 1_000
    let count = parsed[option: "latency-count"].flatMap(Int.init) ?? 5_000
    var results: [BenchResult] = []
    for n in sizes {
        results += MosquittoFanout.run(n: n, broadcasts: broadcasts, qos: 1)
        results += MosquittoFanout.run(n: n, broadcasts: broadcasts, qos: 0)
        results += MosquittoFanout.latency(n: n, rate: rate, count: count)
    }
    return results
}

if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "mqtt-subscribers" {
    exit(MQTTSubscriberSwarm.main(Array(CommandLine.arguments.dropFirst(2))))
}

do {
    let parsed = try Arguments(
        Array(CommandLine.arguments.dropFirst()),
        valued: ["messages", "round-trips", "size", "posts", "dismisses", "sends", "fanout", "broadcasts", "rate", "latency-count"],
        flags: ["no-mosquitto", "no-services", "json"])
    if parsed.has("help") {
        print(usage)
        exit(0)
    }
    var fanoutSizes: [Int] = []
    if let list = parsed[option: "fanout"] {
        fanoutSizes = list.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !fanoutSizes.isEmpty, fanoutSizes.allSatisfy({ $0 > 0 }) else {
            throw Arguments.Error(description: "--fanout takes subscriber counts such as 1000,10000")
        }
    }
    switch parsed.positionals.first {
    case nil:
        break
    case "fanout-mqtt":
        let results = mosquittoFanout(parsed, sizes: fanoutSizes.isEmpty ? [1_000, 10_000] : fanoutSizes)
        BenchReport.print(results, settings: BenchSettings(messages: 0, roundTrips: 0, size: FanoutPayload.size), json: parsed.has("json"))
        exit(0)
    case let other?:
        throw Arguments.Error(description: "unknown command \(other); see --help")
    }
    let settings = BenchSettings(
        messages: parsed[option: "messages"].flatMap(Int.init) ?? 500_000,
        roundTrips: parsed[option: "round-trips"].flatMap(Int.init) ?? 20_000,
        size: parsed[option: "size"].flatMap(Int.init) ?? 200)
    var results: [BenchResult] = []
    results.append(try RawZMQBench.pushPull(settings))
    results.append(try BusBench.pushPull(settings))
    results.append(try BusBench.sequencedPubSub(settings))
    results.append(try RawZMQBench.requestReply(settings))
    results.append(try BusBench.requestReply(settings))
    results.append(try BusBench.hubProtocolRequests(settings))
    results.append(try CodecBench.userPost(settings.roundTrips))
    if !parsed.has("no-mosquitto") {
        results.append(MosquittoBench.publishSubscribe(settings))
    }
    if !parsed.has("no-services") {
        results += try BreakingNewsBench.run(sends: parsed[option: "sends"].flatMap(Int.init) ?? 1_000)
        results += try UserSyncBench.run(
            posts: parsed[option: "posts"].flatMap(Int.init) ?? 1_000, dismisses: parsed[option: "dismisses"].flatMap(Int.init) ?? 1_000)
    }
    results += mosquittoFanout(parsed, sizes: fanoutSizes)
    BenchReport.print(results, settings: settings, json: parsed.has("json"))
} catch {
    FileHandle.standardError.write(Data("nh-bench: \(error)\n".utf8))
    exit(2)
}
