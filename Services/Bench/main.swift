import Foundation
import ServiceKit

#if canImport(Glibc)
import Glibc
#endif

let usage = """
    nh-bench: throughput of the hub's bus beside raw libzmq and Mosquitto, measured in one run

    Usage: nh-bench [--messages N] [--round-trips N] [--size BYTES] [--sends N] [--posts N] [--dismisses N]
                    [--fanout N,N...] [--broadcasts B] [--rate SENDS/S] [--latency-count C]
                    [--push N] [--standins PATH] [--popups N] [--tries N] [--no-mosquitto] [--no-services]
                    [--no-fanout] [--no-push] [--no-postgres] [--no-desktop] [--no-unifiedpush] [--no-hubs] [--hubs H]
                    [--no-offline] [--devices N] [--json] [--output FILE]
           nh-bench http [--sends N]
           nh-bench postgres [--sends N] [--json] [--output FILE]
           nh-bench push [--push N] [--standins PATH] [--json] [--output FILE]
           nh-bench fanout [--fanout N,N...] [--broadcasts B] [--rate SENDS/S] [--latency-count C] [--hubs H] [--json] [--output FILE]
           nh-bench fanout-mqtt [--fanout N,N...] [--broadcasts B] [--rate SENDS/S] [--latency-count C] [--json] [--output FILE]
           nh-bench fanout-shards [--fanout N] [--broadcasts B] [--json] [--output FILE]
           nh-bench hubs [--hubs H] [--per-hub I] [--sends N] [--offline M] [--json] [--output FILE]
           nh-bench users [--posts N] [--dismisses N] [--json] [--output FILE]
           nh-bench offline [--devices N] [--broadcasts B] [--connected C] [--returning R] [--missed M]
                            [--no-postgres] [--json] [--output FILE]
           nh-bench curve-connect [--fanout N] [--json] [--output FILE]
           nh-bench instructions [--fanout N] [--broadcasts B] [--json] [--output FILE]
           nh-bench desktop [--popups N] [--tries N] [--json] [--output FILE]
           nh-bench unifiedpush [--pushes N] [--json] [--output FILE]

    The service figures start the real executables from nh-bench's own folder on free loopback ports.
    The fan-out figures (at N = 1,000 and 10,000 unless --fanout says otherwise) broadcast B times
    (default 10) to N simulated agents, each a real installation and a CURVE connection that
    acknowledges every delivery, then time sends to one agent at a fixed rate (default 1,000/s)
    with all N connected; beside them, Mosquitto fans the same payload out to N subscribers at
    QoS 1 and QoS 0, and to one of N at the same rate. The CPU per delivery, the dispatcher's
    beside the Mosquitto broker's at QoS 1, is user and system time of all the process's threads
    (/proc/PID/stat) over a run of B broadcasts less that over a run of 2, divided by the
    deliveries between them, so that connecting and each run's fixed costs are not counted.
    `fanout` runs only those; `fanout-mqtt` only Mosquitto's. Before the hub's connect figure, the
    same N CURVE connections are timed to a bare libzmq ROUTER that echoes (`curve-connect` alone):
    the floor under connecting, with the connections the kernel dropped for a full accept queue.

    The instruction figure (`instructions`, `make bench-instructions`) runs the dispatcher under
    valgrind's callgrind and broadcasts to N agents (default 200) as the fan-out does: the
    instructions of all its threads over B broadcasts less those over 2, per acknowledged delivery.
    It does not depend on the machine's load, so it shows regressions that timings cannot.

    The sharded fan-out figures (`fanout-shards`, and part of the whole run unless --no-fanout or
    --no-postgres) broadcast B times (default 10) to N agents (default 10,000) served by one
    dispatcher on SQLite files, the reference; then with the stores on a throwaway PostgreSQL
    server (as the PostgreSQL figures do), a fresh database each round, by one dispatcher (goal
    0.8× the SQLite rate), then by two that split the 64 shards (each with its own endpoints; the
    agents are given both and follow the redirect to their shard's owner). Beside each rate, the
    dispatchers' CPU seconds (user+system, from /proc) over the broadcasts per 1,000 acknowledged
    deliveries, summed over both dispatchers (goal at most 1.1× one's); then, on paper, the rate
    of 8 and 16 dispatchers with a core each, from those two CPU figures.

    With --hubs H, `fanout` runs each of its figures again with H hubs of 10 installations each made
    beside the default hub, whose agents they are of, each against its figure with the default hub alone.

    The hub figures (`hubs`, and part of the whole run unless --no-hubs, where --hubs H also runs
    the fan-out figures beside H hubs) measure the same services with the default hub alone, then with H more
    hubs (default 1,000) of I installations each (default 10): each service's resident memory per
    hub made; and, with one hub and with H, N template sends accepted durably from 4 backends, and
    a broadcast to M offline installations of the default hub (default 10,000) planned and stored,
    from the send until the dispatcher's outcome is Completed.

    The offline figures (`offline`, and part of the whole run unless --no-offline) import N Linux
    installations (default 1,000,000) by a job from a file, connect C simulated agents beside them
    (default 1,000), then broadcast B times (default 3) to all of them: the import's rate, until the
    job completed and until the dispatcher had every one; the dispatcher's resident memory per
    installation indexed; per broadcast, the time until it is planned and durable, and what it adds
    to the data folder and to the dispatcher's resident memory. Then R more agents (default 10,000),
    registered but not connected, miss M broadcasts (default 10) and connect: the seconds until all
    have caught up, and how many deliveries came twice. Then the same import and broadcasts with
    the stores on a throwaway PostgreSQL server and two dispatchers (unless --no-postgres).

    The push figures (`push`, and part of the whole run unless --no-push) start the stand-in push
    services (python3 Tests/Support/pushstandins.py, found above nh-bench's folder, under
    NH_REPO_DIR, or at --standins PATH), register N APNs devices and N Web Push subscriptions
    (default 5,000 each) and time 3 template broadcasts to each until the dispatcher has counted
    all N taken; beside them, the curl command sends the same N requests to the same stand-in over
    one HTTP/2 connection. Without python3 or the stand-ins' packages they are skipped with a message.

    The PostgreSQL figures (`postgres`, and part of the whole run unless --no-postgres) start a
    throwaway server (python3 Tests/Support/pgserver.py serve, found as the stand-ins are) and time,
    in 3 alternating rounds, N template sends (--sends, default 1,000) from 4 backends, and the
    same pipelined from 8 clients with 32 each in flight, accepted durably by fresh services on
    SQLite and on PostgreSQL; beside them, N rows shaped like the
    accepted notifications inserted into the same server from 4 connections, one per commit and 100
    per commit. Without python3 or PostgreSQL they are skipped with a message.

    The desktop figures (`desktop`, and part of the whole run unless --no-desktop) run
    Tests/Support/desktopbench.py: two devices of one user, each with its own Xvfb display, session
    bus and dunst, and an agent on each. Popups per second through the agent's own D-Bus connection
    (N user notifications waiting for it, default 200) beside notify-send run once per popup and
    beside a plain D-Bus client calling Notify, all against the same dunst; a burst of N posts until
    both desktops show it; and from a close on device 1 until device 2's popup is withdrawn, p50
    and p99 over --tries (default 100). Without Xvfb, dbus-daemon, dunst or jeepney they are skipped.

    The UnifiedPush figures (`unifiedpush`, and part of the whole run unless --no-unifiedpush) run
    Tests/Support/upbench.py: a hub, agents on private session buses (dbus-daemon) and app
    connectors in the script's own process. From an application server's POST to an endpoint until
    the connector gets Message, p50 and p99 over N sequential pushes (--pushes, default 300), beside
    the same for a plain hub notification to that agent (until its output line); messages per
    second into one endpoint, beside plain notifications to the agent; and into 1,000 endpoints
    (10 agents with 100 apps each). Without dbus-daemon or jeepney they are skipped.

    --output FILE also writes every figure to FILE as one JSON document: {"machine": {"cores",
    "date", "host", "os", "memoryBytes"}, "settings": {...}, "results": [{"name", "unit", "rate",
    "baseline", "ratio", "note", ...}]}; deploy/bench-chart.py draws it.
    """

/// Prints the figures, and writes them to --output's file when it is given.
func report(_ results: [BenchResult], settings: BenchSettings, _ parsed: Arguments) throws {
    BenchReport.print(results, settings: settings, json: parsed.has("json"))
    if let path = parsed[option: "output"] {
        try BenchReport.write(results, settings: settings, to: path, arguments: Array(CommandLine.arguments.dropFirst()))
    }
}

/// The fan-out figures at each N: the hub's, then Mosquitto's at QoS 1 and QoS 0 and its latency.
func fanout(_ parsed: Arguments, sizes: [Int], hub: Bool, mosquitto: Bool) throws -> [BenchResult] {
    let broadcasts = parsed[option: "broadcasts"].flatMap(Int.init) ?? 10
    let rate = parsed[option: "rate"].flatMap(Int.init) ?? 1_000
    let count = parsed[option: "latency-count"].flatMap(Int.init) ?? 5_000
    var results: [BenchResult] = []
    let hubs = parsed[option: "hubs"].flatMap(Int.init) ?? 0
    for n in sizes {
        if hub {
            let alone = try FanoutBench.run(agents: n, broadcasts: broadcasts, latencySends: count, rate: rate)
            results += alone
            // The same beside many hubs, each figure against its own with the default hub alone.
            if hubs > 0 {
                results += try FanoutBench.run(agents: n, broadcasts: broadcasts, latencySends: count, rate: rate, hubs: hubs).map { figure in
                    var beside = figure
                    beside.name = "\(figure.name), \(hubs.formatted()) hubs beside"
                    beside.baseline = alone.contains { $0.name == figure.name } ? figure.name : nil
                    return beside
                }
            }
        }
        if mosquitto {
            let long = MosquittoFanout.measure(n: n, broadcasts: broadcasts, qos: 1)
            results += long.results
            let short = MosquittoFanout.measure(n: n, broadcasts: FanoutBench.shortBroadcasts, qos: 1)
            results.append(MosquittoFanout.cpuPerDelivery(n: n, qos: 1, short: short, long: long))
            results += MosquittoFanout.run(n: n, broadcasts: broadcasts, qos: 0)
            results += MosquittoFanout.latency(n: n, rate: rate, count: count)
        }
    }
    return results
}

/// `fanout-shards`' N: --fanout's one agent count, else the default.
/// The offline figures' scale: --devices, --connected, --returning, --missed, and with
/// `broadcasts` (the offline command, where it is not the fan-out's) --broadcasts.
func offlineScale(_ parsed: Arguments, broadcasts: Bool) -> OfflineBench.Scale {
    var scale = OfflineBench.Scale()
    scale.devices = parsed[option: "devices"].flatMap(Int.init) ?? scale.devices
    scale.connected = parsed[option: "connected"].flatMap(Int.init) ?? scale.connected
    scale.returning = parsed[option: "returning"].flatMap(Int.init) ?? scale.returning
    scale.missed = parsed[option: "missed"].flatMap(Int.init) ?? scale.missed
    if broadcasts { scale.broadcasts = parsed[option: "broadcasts"].flatMap(Int.init) ?? scale.broadcasts }
    return scale
}

func shardedFanoutAgents(_ parsed: Arguments) throws -> Int {
    guard let text = parsed[option: "fanout"] else { return FanoutShardsBench.defaultAgents }
    guard let agents = Int(text.trimmingCharacters(in: .whitespaces)), agents > 0 else {
        throw Arguments.Error(description: "fanout-shards takes one agent count, such as --fanout 10000")
    }
    return agents
}

if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "mqtt-subscribers" {
    exit(MQTTSubscriberSwarm.main(Array(CommandLine.arguments.dropFirst(2))))
}

do {
    if CommandLine.arguments.dropFirst().first == "curve-clients" {
        try CurveConnectBench.clients(Array(CommandLine.arguments.dropFirst(2)))
        exit(0)
    }
    if CommandLine.arguments.dropFirst().first == "fleet" {
        let parsed = try Arguments(Array(CommandLine.arguments.dropFirst(2)), valued: ["count", "prefix", "tag"], flags: [])
        var options = AgentFleet.Options()
        options.count = parsed[option: "count"].flatMap(Int.init) ?? options.count
        options.prefix = parsed[option: "prefix"] ?? options.prefix
        options.tag = parsed[option: "tag"] ?? options.tag
        try AgentFleet.run(options)
        exit(0)
    }
    let parsed = try Arguments(
        Array(CommandLine.arguments.dropFirst()),
        valued: [
            "messages", "round-trips", "size", "posts", "dismisses", "sends", "fanout", "broadcasts", "rate", "latency-count", "output", "push",
            "standins", "popups", "tries", "pushes", "hubs", "per-hub", "offline", "devices", "connected", "returning", "missed",
        ],
        flags: ["no-mosquitto", "no-services", "no-fanout", "no-push", "no-postgres", "no-desktop", "no-unifiedpush", "no-hubs", "no-offline", "json"])
    if parsed.has("help") {
        print(usage)
        exit(0)
    }
    if let path = parsed[option: "output"] {
        // Checked before the run, not after it: a run takes minutes.
        let folder = URL(fileURLWithPath: path).deletingLastPathComponent().path
        guard FileManager.default.isWritableFile(atPath: folder) else {
            throw Arguments.Error(description: "--output \(path): cannot write to the folder \(folder)")
        }
    }
    var fanoutSizes = [1_000, 10_000]
    if let list = parsed[option: "fanout"] {
        fanoutSizes = list.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !fanoutSizes.isEmpty, fanoutSizes.allSatisfy({ $0 > 0 }) else {
            throw Arguments.Error(description: "--fanout takes agent counts such as 1000,10000")
        }
    }
    let pushDevices = parsed[option: "push"].flatMap(Int.init) ?? 5_000
    guard pushDevices > 0 else { throw Arguments.Error(description: "--push takes a number of devices such as 5000") }
    let settings = BenchSettings(
        messages: parsed[option: "messages"].flatMap(Int.init) ?? 500_000,
        roundTrips: parsed[option: "round-trips"].flatMap(Int.init) ?? 20_000,
        size: parsed[option: "size"].flatMap(Int.init) ?? 200)
    let sends = parsed[option: "sends"].flatMap(Int.init) ?? 1_000
    let popups = parsed[option: "popups"].flatMap(Int.init) ?? 200
    let tries = parsed[option: "tries"].flatMap(Int.init) ?? 100
    let pushes = parsed[option: "pushes"].flatMap(Int.init) ?? 300
    switch parsed.positionals.first {
    case nil:
        break
    case "http":
        BenchReport.print(
            try HTTPSendBench.run(sends: 2 * sends), settings: settings, json: parsed.has("json"))
        exit(0)
    case "postgres":
        try report(
            try PostgresBench.run(sends: sends),
            settings: BenchSettings(messages: 0, roundTrips: 0, size: PostgresBench.bodySize), parsed)
        exit(0)
    case "push":
        try report(
            try PushBench.run(devices: pushDevices, standIns: parsed[option: "standins"]),
            settings: BenchSettings(messages: 0, roundTrips: 0, size: PushBench.appleBody.utf8.count), parsed)
        exit(0)
    case "desktop":
        try report(try DesktopBench.run(popups: popups, tries: tries), settings: BenchSettings(messages: 0, roundTrips: 0, size: 0), parsed)
        exit(0)
    case "unifiedpush":
        try report(try UnifiedPushBench.run(messages: pushes), settings: BenchSettings(messages: 0, roundTrips: 0, size: 0), parsed)
        exit(0)
    case "instructions":
        let agents = try parsed[option: "fanout"].map { text throws -> Int in
            guard let agents = Int(text.trimmingCharacters(in: .whitespaces)), agents > 0 else {
                throw Arguments.Error(description: "instructions takes one agent count, such as --fanout 200")
            }
            return agents
        } ?? 200
        try report(
            try FanoutBench.instructions(agents: agents, broadcasts: parsed[option: "broadcasts"].flatMap(Int.init) ?? 10),
            settings: BenchSettings(messages: 0, roundTrips: 0, size: FanoutPayload.size), parsed)
        exit(0)
    case "curve-connect":
        let agents = try shardedFanoutAgents(parsed)
        let outcome = try CurveConnectBench.run(agents: agents)
        try report(
            CurveConnectBench.results(n: agents, outcome: outcome),
            settings: BenchSettings(messages: 0, roundTrips: 0, size: 5), parsed)
        exit(0)
    case "offline":
        let scale = offlineScale(parsed, broadcasts: true)
        var results = try OfflineBench.run(scale)
        if !parsed.has("no-postgres") {
            do {
                results += try OfflineBench.onPostgres(devices: scale.devices, broadcasts: scale.broadcasts)
            } catch let error as BenchUnavailable {
                FileHandle.standardError.write(Data("nh-bench: PostgreSQL figures skipped: \(error)\n".utf8))
            }
        }
        try report(results, settings: BenchSettings(messages: 0, roundTrips: 0, size: 0), parsed)
        exit(0)
    case "users":
        try report(
            try UserSyncBench.run(
                posts: parsed[option: "posts"].flatMap(Int.init) ?? 1_000, dismisses: parsed[option: "dismisses"].flatMap(Int.init) ?? 1_000),
            settings: BenchSettings(messages: 0, roundTrips: 0, size: 0), parsed)
        exit(0)
    case "hubs":
        try report(
            try HubsBench.run(
                hubs: parsed[option: "hubs"].flatMap(Int.init) ?? 1_000, perHub: parsed[option: "per-hub"].flatMap(Int.init) ?? 10,
                sends: sends, offline: parsed[option: "offline"].flatMap(Int.init) ?? 10_000),
            settings: BenchSettings(messages: 0, roundTrips: 0, size: 0), parsed)
        exit(0)
    case "fanout-shards":
        let agents = try shardedFanoutAgents(parsed)
        try report(
            try FanoutShardsBench.run(agents: agents, broadcasts: parsed[option: "broadcasts"].flatMap(Int.init) ?? 10),
            settings: BenchSettings(messages: 0, roundTrips: 0, size: FanoutPayload.size), parsed)
        exit(0)
    case "fanout", "fanout-mqtt":
        let hub = parsed.positionals.first == "fanout"
        let results = (hub ? [try RawZMQBench.pushPull(settings)] : [])
            + (try fanout(parsed, sizes: fanoutSizes, hub: hub, mosquitto: !parsed.has("no-mosquitto")))
        try report(results, settings: BenchSettings(messages: 0, roundTrips: 0, size: FanoutPayload.size), parsed)
        exit(0)
    case let other?:
        throw Arguments.Error(description: "unknown command \(other); see --help")
    }
    var results: [BenchResult] = []
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
        results += try HTTPSendBench.run(sends: 2 * sends)
        results += try BreakingNewsBench.run(sends: sends)
        results += try UserSyncBench.run(
            posts: parsed[option: "posts"].flatMap(Int.init) ?? 1_000, dismisses: parsed[option: "dismisses"].flatMap(Int.init) ?? 1_000)
        if !parsed.has("no-hubs") {
            results += try HubsBench.run(
                hubs: parsed[option: "hubs"].flatMap(Int.init) ?? 1_000, perHub: parsed[option: "per-hub"].flatMap(Int.init) ?? 10,
                sends: 2 * sends, offline: parsed[option: "offline"].flatMap(Int.init) ?? 10_000)
        }
        if !parsed.has("no-offline") {
            let scale = offlineScale(parsed, broadcasts: false)
            results += try OfflineBench.run(scale)
            if !parsed.has("no-postgres") {
                do {
                    results += try OfflineBench.onPostgres(devices: scale.devices, broadcasts: scale.broadcasts)
                } catch let error as BenchUnavailable {
                    FileHandle.standardError.write(Data("nh-bench: PostgreSQL import skipped: \(error)\n".utf8))
                }
            }
        }
        if !parsed.has("no-postgres") {
            do {
                results += try PostgresBench.run(sends: sends)
            } catch let error as BenchUnavailable {
                FileHandle.standardError.write(Data("nh-bench: PostgreSQL figures skipped: \(error)\n".utf8))
            }
        }
        if !parsed.has("no-desktop") {
            do {
                results += try DesktopBench.run(popups: popups, tries: tries)
            } catch let error as BenchUnavailable {
                FileHandle.standardError.write(Data("nh-bench: desktop figures skipped: \(error)\n".utf8))
            }
        }
        if !parsed.has("no-unifiedpush") {
            do {
                results += try UnifiedPushBench.run(messages: pushes)
            } catch let error as BenchUnavailable {
                FileHandle.standardError.write(Data("nh-bench: UnifiedPush figures skipped: \(error)\n".utf8))
            }
        }
        if !parsed.has("no-push") {
            do {
                results += try PushBench.run(devices: pushDevices, standIns: parsed[option: "standins"])
            } catch let error as BenchUnavailable {
                FileHandle.standardError.write(Data("nh-bench: push figures skipped: \(error)\n".utf8))
            }
        }
        if !parsed.has("no-fanout") {
            results += try fanout(parsed, sizes: fanoutSizes, hub: true, mosquitto: !parsed.has("no-mosquitto"))
            if !parsed.has("no-postgres") {
                do {
                    results += try FanoutShardsBench.run(
                        agents: FanoutShardsBench.defaultAgents, broadcasts: parsed[option: "broadcasts"].flatMap(Int.init) ?? 10)
                } catch let error as BenchUnavailable {
                    FileHandle.standardError.write(Data("nh-bench: sharded fan-out figures skipped: \(error)\n".utf8))
                }
            }
        }
    }
    try report(results, settings: settings, parsed)
} catch {
    FileHandle.standardError.write(Data("nh-bench: \(error)\n".utf8))
    exit(2)
}
