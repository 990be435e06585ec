import Foundation
import HubProtocol
import ServiceKit
import Synchronization

/// Template sends to a tag through the real services: durable acceptance, then rendering and
/// delivery to three subscribed agents until each has shown every one.
enum BreakingNewsBench {
    /// The `index`th send: a template send to the tag World.
    static func send(_ index: Int) -> SendNotification {
        SendNotification(format: .template, properties: ["messageParam": "Breaking World News \(index)"], tagExpression: "World")
    }

    static func run(sends: Int) throws -> [BenchResult] {
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        try cluster.startServices()
        var watchers: [AgentWatcher] = []
        for index in 0..<3 {
            let environment = [
                "NH_AGENT_HOME": cluster.dataDirectory.appendingPathComponent("agent-\(index)").path,
                "NH_AGENT_REQUESTS": try HubCluster.freeEndpoint(),
            ]
            let subscribe = Process()
            subscribe.executableURL = cluster.binDirectory.appendingPathComponent("nh-agent")
            subscribe.arguments = ["subscribe", "World"]
            subscribe.environment = cluster.environment.merging(environment) { $1 }
            subscribe.standardOutput = FileHandle.nullDevice
            try subscribe.run()
            subscribe.waitUntilExit()
            let watcher = AgentWatcher()
            watcher.start()
            _ = try cluster.start("nh-agent", environment: environment, output: watcher.pipe)
            watchers.append(watcher)
        }
        let dispatcher = cluster.environment["NH_DISPATCH_REQUESTS"]!
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let details = try cluster.waitHealthy(dispatcher).details
            if details?["agents"] == "3" && details?["installations"] == "3" { break }
            Thread.sleep(forTimeInterval: 0.05)
        }

        let accepted = Mutex(0)
        let start = ContinuousClock.now
        let group = DispatchGroup()
        let publish = cluster.environment["NH_PUBLISH_REQUESTS"]!
        let full = try cluster.credential()
        let bus = cluster.bus
        for thread in 0..<4 {
            group.enter()
            Thread {
                defer { group.leave() }
                guard let client = try? HubCluster.client(publish, credential: full, bus: bus) else { return }
                for index in stride(from: thread, to: sends, by: 4) where (try? client.call(send(index))) != nil {
                    accepted.withLock { $0 += 1 }
                }
            }.start()
        }
        group.wait()
        let acceptSeconds = seconds(since: start)
        let everywhere = watchers.allSatisfy { $0.wait(count: sends, of: "notification", timeout: 120) }
        let deliverSeconds = seconds(since: start)
        let count = accepted.withLock { $0 }
        return [
            BenchResult(
                name: "template sends accepted, durable", unit: "send/s", count: count, seconds: acceptSeconds,
                note: "\(count) sends to tag World, 4 backends"),
            BenchResult(
                name: "… rendered and shown on 3 agents", unit: "send/s", count: everywhere ? sends : 0, seconds: deliverSeconds,
                note: everywhere ? "\(sends * 3) deliveries, each acknowledged" : "not all shown within 120 s"),
        ]
    }
}
