import Foundation
import HubProtocol
import ServiceKit
import Synchronization

/// Per-user notifications through the real services: durable posts to a user with three devices,
/// and how long a dismiss on one device takes to show on another.
enum UserSyncBench {
    static func run(posts: Int, dismisses: Int) throws -> [BenchResult] {
        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        try cluster.startServices()
        let sync = try cluster.client("NH_SYNC_REQUESTS")
        let credential = try sync.call(IssueUserCredential(userId: "bench")).credential

        var watchers: [AgentWatcher] = []
        var devices: [String] = []
        for index in 0..<(Int(ProcessInfo.processInfo.environment["NH_BENCH_DEVICES"] ?? "3") ?? 3) {
            let watcher = AgentWatcher()
            watcher.start()
            let control = try HubCluster.freeEndpoint()
            let home = cluster.dataDirectory.appendingPathComponent("device-\(index)")
            _ = try cluster.start("nh-agent", environment: [
                "NH_AGENT_HOME": home.path, "NH_AGENT_REQUESTS": control, "NH_AGENT_USER_CREDENTIAL": credential,
            ], output: watcher.pipe)
            var health = try cluster.waitHealthy(control, agentHome: home)
            let deadline = Date().addingTimeInterval(30)
            while health.details?["registered"] != "true" && Date() < deadline { health = try cluster.waitHealthy(control, agentHome: home) }
            devices.append(health.details?["installationId"] ?? "")
            watchers.append(watcher)
        }
        let dispatcher = cluster.environment["NH_DISPATCH_REQUESTS"]!
        let deadline = Date().addingTimeInterval(30)
        while try cluster.waitHealthy(dispatcher).details?["agents"] != String(watchers.count) && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }

        // Durable posts from four concurrent backends; each reply comes after the sync store's commit.
        let ids = Mutex<[String]>([])
        let start = ContinuousClock.now
        let group = DispatchGroup()
        let threads = 4
        let publish = cluster.environment["NH_PUBLISH_REQUESTS"]!
        let full = try cluster.credential()
        let bus = cluster.bus
        for thread in 0..<threads {
            group.enter()
            Thread {
                defer { group.leave() }
                guard let client = try? HubCluster.client(publish, credential: full, bus: bus) else { return }
                for index in stride(from: thread, to: posts, by: threads) {
                    guard let reply = try? client.call(PostUserNotification(
                        userId: "bench", appNotificationId: "post-\(index)", visual: VisualContent(title: "Bench", body: "post \(index)")))
                    else { continue }
                    ids.withLock { $0.append(reply.notification.id) }
                }
            }.start()
        }
        group.wait()
        let postSeconds = seconds(since: start)
        let everywhere = watchers.allSatisfy { $0.wait(count: posts, of: "user.created") }
        let shownSeconds = seconds(since: start)

        // Dismiss on device 0, time until device 1 shows it.
        let user = try cluster.client("NH_SYNC_REQUESTS")
        let token = try user.call(UserTokenRequest(credential: credential)).token
        user.auth = { token }
        var latencies: [Double] = []
        for id in ids.withLock({ $0 }).prefix(watchers.count >= 2 ? dismisses : 0) {
            let sent = ContinuousClock.now
            _ = try user.call(UpdateUserNotificationState(id: id, userActionState: .dismissed, device: devices[0]))
            guard let shown = watchers[1].wait("user.updated", id) else { continue }
            let elapsed = sent.duration(to: shown)
            latencies.append(Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
        }
        latencies.sort()
        func percentile(_ p: Double) -> Double {
            latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int((Double(latencies.count) * p).rounded(.up)) - 1)]
        }
        let posted = ids.withLock { $0.count }
        return [
            BenchResult(
                name: "user posts, durable (publish → sync store)", unit: "post/s", count: posted, seconds: postSeconds,
                baseline: "template sends accepted, durable",
                note: "\(posted) posts, 4 backends, user with 3 devices; beside template sends from 4 backends to 3 agents; goal 0.5×"),
            BenchResult(
                name: "user posts shown on all 3 devices", unit: "post/s", count: everywhere ? posts : 0, seconds: shownSeconds,
                note: everywhere ? "signal → fetch in batches → agent output" : "not all shown within 60 s"),
            BenchResult(
                name: "dismiss → other device shows it, p50", unit: "ms", count: 0, seconds: 0, value: percentile(0.50),
                note: "\(latencies.count) of \(dismisses) dismisses"),
            BenchResult(name: "dismiss → other device shows it, p99", unit: "ms", count: 0, seconds: 0, value: percentile(0.99)),
        ]
    }
}
