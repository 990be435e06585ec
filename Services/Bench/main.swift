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
    let parsed = try Arguments(
        Array(CommandLine.arguments.dropFirst()), valued: ["messages", "round-trips", "size", "posts", "dismisses", "sends"],
        flags: ["no-mosquitto", "no-services", "json"])
    if parsed.has("help") {
        print(usage)
        exit(0)
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
    BenchReport.print(results, settings: settings, json: parsed.has("json"))
} catch {
    FileHandle.standardError.write(Data("nh-bench: \(error)\n".utf8))
    exit(2)
}
