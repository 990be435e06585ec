import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Synchronization

/// What many hubs cost, and what they do not: the same services measured with the default hub
/// alone, then with H more hubs (each with a few installations) made beside it. Per hub, each
/// service's resident memory; with one hub and with H, template sends accepted durably, and a
/// broadcast to the default hub's offline installations planned and stored.
enum HubsBench {
    static let namespace = "http://127.0.0.1:7780/"

    struct Phase {
        var acceptSeconds = 0.0
        var accepted = 0
        var planSeconds = 0.0
        var planned = 0
    }

    static func run(hubs: Int, perHub: Int, sends: Int, offline: Int, rounds: Int = 5, broadcasts: Int = 10) throws -> [BenchResult] {
        let services = ["nh-registry", "nh-publish", "nh-dispatch", "nh-sync", "nh-gateway"]
        // Two namespaces side by side, measured in turn: the default hub alone, and with H more hubs.
        let one = try HubCluster(), many = try HubCluster()
        defer {
            one.stopAll()
            many.stopAll()
        }
        for cluster in [one, many] {
            try cluster.startServices()
            try registerOffline(cluster, count: offline)
        }
        // The gateway reads the hub catalog too: its memory per hub is measured beside the others'.
        let port = try HubCluster.freeEndpoint().split(separator: ":").last.map(String.init) ?? "7780"
        _ = try many.start("nh-gateway", environment: ["NH_GATEWAY_LISTEN": "127.0.0.1:\(port)"])
        try many.waitHealthy(many.environment["NH_GATEWAY_REQUESTS"]!)
        let before = services.map { FanoutBench.residentBytes(many.process($0)!.processIdentifier) }
        let creating = ContinuousClock.now
        try makeHubs(many, count: hubs)
        let createSeconds = seconds(since: creating)
        // Every service reads the catalog each second.
        Thread.sleep(forTimeInterval: 3 * HubCatalogFollower.interval)
        let withHubs = services.map { FanoutBench.residentBytes(many.process($0)!.processIdentifier) }
        try fillHubs(many, count: hubs, perHub: perHub)
        try settle(many, installations: offline + hubs * perHub)
        let withInstallations = services.map { FanoutBench.residentBytes(many.process($0)!.processIdentifier) }

        var accepts: [[Phase]] = [[], []], plans: [[Phase]] = [[], []]
        // In turn, each going first in every other round.
        for round in 0..<rounds {
            let order = round % 2 == 0 ? [0, 1] : [1, 0]
            let clusters = [one, many]
            for index in order { accepts[index].append(try accept(clusters[index], sends: sends)) }
            for index in order { plans[index].append(try plan(clusters[index], broadcasts: broadcasts)) }
        }
        func median(_ phases: [Phase], _ rate: (Phase) -> Double) -> Phase { phases.sorted { rate($0) < rate($1) }[phases.count / 2] }
        let acceptOne = median(accepts[0]) { Double($0.accepted) / $0.acceptSeconds }
        let acceptMany = median(accepts[1]) { Double($0.accepted) / $0.acceptSeconds }
        let planOne = median(plans[0]) { Double($0.planned) / $0.planSeconds }
        let planMany = median(plans[1]) { Double($0.planned) / $0.planSeconds }
        let acceptName = "hubs: template sends accepted, durable, 1 hub"
        let planName = "hubs: broadcasts to \(offline.formatted()) offline installations planned and stored, 1 hub"
        var results: [BenchResult] = [
            BenchResult(
                name: acceptName, unit: "send/s", count: acceptOne.accepted, seconds: acceptOne.acceptSeconds,
                note: "\(sends) sends from 4 backends to the default hub; median of \(rounds) rounds"),
            BenchResult(
                name: "hubs: template sends accepted, durable, \(hubs.formatted()) hubs", unit: "send/s", count: acceptMany.accepted,
                seconds: acceptMany.acceptSeconds, baseline: acceptName,
                note: "the same, beside it, with \(hubs.formatted()) more hubs of \(perHub) installations each"),
            BenchResult(
                name: planName, unit: "target/s", count: planOne.planned, seconds: planOne.planSeconds,
                note: "\(broadcasts) broadcasts, each from the send until the dispatcher's outcome is Completed; median of \(rounds) rounds"),
            BenchResult(
                name: "hubs: broadcasts to \(offline.formatted()) offline installations planned and stored, \(hubs.formatted()) hubs",
                unit: "target/s", count: planMany.planned, seconds: planMany.planSeconds, baseline: planName,
                note: "the same, beside it, with \(hubs.formatted()) more hubs"),
            BenchResult(name: "hubs: \(hubs.formatted()) hubs made", unit: "hub/s", count: hubs, seconds: createSeconds, note: "one at a time, over the bus"),
        ]
        for (index, service) in services.enumerated() {
            let perHubBytes = Double(withHubs[index] - before[index]) / Double(hubs)
            let perInstallation = Double(withInstallations[index] - withHubs[index]) / Double(hubs * perHub)
            results.append(BenchResult(
                name: "hubs: \(service) memory per hub", unit: "B", count: hubs, seconds: 0, value: perHubBytes,
                note: "resident growth over \(hubs.formatted()) hubs made; then \(String(format: "%.0f", perInstallation)) B per installation of theirs"))
        }
        return results
    }

    /// Makes `count` hubs beside the default one, one at a time over the bus, with the namespace's key.
    static func makeHubs(_ cluster: HubCluster, count: Int) throws {
        let root = try rootCredential(cluster)
        let manage = try HubCluster.client(cluster.environment["NH_REGISTRY_REQUESTS"]!, credential: root, bus: cluster.bus)
        manage.auth = { root.token(for: namespace) }
        defer { manage.close() }
        for index in 0..<count { _ = try manage.call(HubCreate(name: name(index))) }
    }

    /// Registers `perHub` installations in each of the hubs `makeHubs` made (APNs devices with the tag World).
    static func fillHubs(_ cluster: HubCluster, count: Int, perHub: Int) throws {
        let registry = try forwarder(cluster)
        defer { registry.close() }
        try BulkRegistration.upsert(
            (0..<(count * perHub)).map { Installation(installationId: "device-\($0 % perHub)", platform: "apns", pushChannel: "CD\($0)", tags: ["World"]) },
            registry: registry, hub: { name($0 / perHub) })
    }

    static func forwarder(_ cluster: HubCluster) throws -> HubForwarder {
        let root = try rootCredential(cluster)
        return try HubForwarder(
            connect: cluster.environment["NH_REGISTRY_REQUESTS"]!, timeoutMs: 30_000, curve: cluster.bus?.client, auth: { root.token(for: namespace) })
    }

    /// `count` installations of the default hub, offline linux agents with a template and the tag Offline.
    static func registerOffline(_ cluster: HubCluster, count: Int) throws {
        let registry = try forwarder(cluster)
        defer { registry.close() }
        try BulkRegistration.upsert(
            (0..<count).map {
                Installation(
                    installationId: "offline-\($0)", platform: "linux", pushChannel: "offline-agent-\($0)", tags: ["Offline"],
                    templates: ["t": InstallationTemplate(body: #"{"message":"$(messageParam)"}"#)])
            },
            registry: registry)
        try settle(cluster, installations: count)
    }

    /// Waits until the dispatcher has every installation, then a second more for the services to be idle.
    static func settle(_ cluster: HubCluster, installations: Int) throws {
        let deadline = Date().addingTimeInterval(120)
        while Date() < deadline {
            if try cluster.waitHealthy(cluster.environment["NH_DISPATCH_REQUESTS"]!).details?["installations"] == String(installations) { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        Thread.sleep(forTimeInterval: 1)
    }

    static func name(_ index: Int) -> String { "bench-\(index)" }

    static func rootCredential(_ cluster: HubCluster) throws -> ConnectionString {
        guard let key = try KeyStore.load(directory: cluster.dataDirectory, fileName: KeyStore.namespaceFileName)?.key(named: AccessKey.rootManageName)
        else { throw BenchError("the services made no \(KeyStore.namespaceFileName)") }
        return ConnectionString(endpoint: namespace, keyName: key.name, key: key.key)
    }

    /// Sends accepted by the default hub from 4 backends.
    static func accept(_ cluster: HubCluster, sends: Int) throws -> Phase {
        let root = try rootCredential(cluster)
        var phase = Phase()
        let accepted = Mutex(0)
        let publish = cluster.environment["NH_PUBLISH_REQUESTS"]!
        let bus = cluster.bus
        let start = ContinuousClock.now
        let group = DispatchGroup()
        for thread in 0..<4 {
            group.enter()
            Thread {
                defer { group.leave() }
                guard let client = try? HubCluster.client(publish, credential: root, bus: bus) else { return }
                client.auth = { root.token(for: namespace) }
                for index in stride(from: thread, to: sends, by: 4) {
                    let send = SendNotification(format: .template, properties: ["messageParam": "n \(index)"], tagExpression: "Nobody")
                    if (try? client.call(send)) != nil { accepted.withLock { $0 += 1 } }
                }
            }.start()
        }
        group.wait()
        phase.acceptSeconds = seconds(since: start)
        phase.accepted = accepted.withLock { $0 }
        return phase
    }

    /// `broadcasts` broadcasts to the default hub's offline installations, one after another, each
    /// until the dispatcher's outcome is Completed: the targets planned and the time they took.
    static func plan(_ cluster: HubCluster, broadcasts: Int) throws -> Phase {
        let root = try rootCredential(cluster)
        var phase = Phase()
        let client = try HubCluster.client(cluster.environment["NH_PUBLISH_REQUESTS"]!, credential: root, bus: cluster.bus)
        client.auth = { root.token(for: namespace) }
        defer { client.close() }
        let dispatch = try HubCluster.client(cluster.environment["NH_DISPATCH_REQUESTS"]!, credential: root, bus: cluster.bus)
        dispatch.auth = { root.token(for: namespace) }
        defer { dispatch.close() }
        let planning = ContinuousClock.now
        for _ in 0..<broadcasts {
            let id = try client.call(SendNotification(format: .template, properties: ["messageParam": "all"], tagExpression: "Offline")).notificationId
            let deadline = Date().addingTimeInterval(120)
            while Date() < deadline {
                // Absent until the dispatcher has planned it.
                if let outcome = try? dispatch.call(OutcomeRequest(notificationId: id)), outcome.state == .completed {
                    phase.planned += outcome.targets
                    break
                }
                Thread.sleep(forTimeInterval: 0.002)
            }
        }
        phase.planSeconds = seconds(since: planning)
        return phase
    }
}
