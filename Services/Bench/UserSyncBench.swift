import Auth
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
        let start = ContinuousClock.now
        let (ids, postSeconds) = try timedPosts(cluster, posts: posts) { index in
            PostUserNotification(userId: "bench", appNotificationId: "post-\(index)", visual: VisualContent(title: "Bench", body: "post \(index)"))
        }
        let everywhere = watchers.allSatisfy { $0.wait(count: posts, of: "user.created") }
        let shownSeconds = seconds(since: start)

        // Dismiss on device 0, time until device 1 shows it.
        let user = try cluster.client("NH_SYNC_REQUESTS")
        let token = try user.call(UserTokenRequest(credential: credential)).token
        user.auth = { token }
        var latencies: [Double] = []
        for id in ids.prefix(watchers.count >= 2 ? dismisses : 0) {
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
        let posted = ids.count
        let encrypted = try encryptedPosts(cluster, posts: posts)
        return encrypted + [
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

    /// The cost of a post encrypted end to end beside a plaintext one, to a user with no device
    /// (the hub's work alone: the framing and key id checked, the record stored): the same content,
    /// 4 backends each. The backend's own encryption (RFC 8291 with a fresh sender key) is timed apart.
    static func encryptedPosts(_ cluster: HubCluster, posts: Int) throws -> [BenchResult] {
        let sync = try cluster.client("NH_SYNC_REQUESTS")
        let credential = try sync.call(IssueUserCredential(userId: "bench-e2e")).credential
        let token = try sync.call(UserTokenRequest(credential: credential)).token
        sync.auth = { token }
        let device = UserKeyring.DeviceEntry(device: "bench-device", publicKey: UserKeyring.newKey().key.publicPoint.base64URL)
        let recovery = RecoveryKey.generate()
        let keyring = UserKeyring.make(recovery: recovery, devices: [device])
        let key = try sync.call(PutUserKey(
            p256dh: keyring.current.p256dh, auth: keyring.current.auth, devices: [UserKeyDevice(device: device.device, publicKey: device.publicKey)],
            devicesSignature: try keyring.signDevices(),
            recovery: UserKeyRecovery(
                publicKey: keyring.recoveryPublicKey, auth: keyring.recoveryAuth,
                record: try keyring.seal(forPublicKey: recovery.key.publicPoint, auth: recovery.auth))))
        let content = #"{"visual":{"title":"Bench","body":"a notification of about the size a person reads, 80 bytes."}}"#
        let encryptStart = ContinuousClock.now
        let records = try (0..<posts).map { _ in
            try WebPushEncryption.encrypt(Data(content.utf8), p256dh: Data(base64URL: key.p256dh)!, auth: Data(base64URL: key.auth)!).base64URL
        }
        let encryptMicroseconds = seconds(since: encryptStart) / Double(max(posts, 1)) * 1e6
        let visual = VisualContent(title: "Bench", body: "a notification of about the size a person reads, 80 bytes.")
        let plain = try timedPosts(cluster, posts: posts) { index in
            PostUserNotification(userId: "bench-plain", appNotificationId: "plain-\(index)", visual: visual)
        }
        let sealed = try timedPosts(cluster, posts: posts) { index in
            PostUserNotification(userId: "bench-e2e", appNotificationId: "sealed-\(index)", encrypted: records[index], keyId: key.keyId)
        }
        return [
            BenchResult(
                name: "user posts, plaintext, to a user with no device", unit: "post/s", count: plain.ids.count, seconds: plain.seconds,
                note: "\(plain.ids.count) posts, 4 backends: the hub's cost alone"),
            BenchResult(
                name: "user posts, encrypted end to end (RFC 8291)", unit: "post/s", count: sealed.ids.count, seconds: sealed.seconds,
                baseline: "user posts, plaintext, to a user with no device",
                note: "record \(records.first?.utf8.count ?? 0) B beside \(content.utf8.count) B of plaintext; the backend's encryption "
                    + String(format: "%.0f µs a post (not counted)", encryptMicroseconds)),
        ]
    }

    /// Posts from 4 backends to the publish service, each reply after the sync store's commit; the
    /// ids of those accepted, and how long they took.
    static func timedPosts(_ cluster: HubCluster, posts: Int, _ make: @escaping @Sendable (Int) -> PostUserNotification) throws
        -> (ids: [String], seconds: Double)
    {
        let accepted = Mutex<[String]>([])
        let publish = cluster.environment["NH_PUBLISH_REQUESTS"]!
        let full = try cluster.credential()
        let bus = cluster.bus
        let group = DispatchGroup()
        let start = ContinuousClock.now
        for thread in 0..<4 {
            group.enter()
            Thread {
                defer { group.leave() }
                guard let client = try? HubCluster.client(publish, credential: full, bus: bus) else { return }
                for index in stride(from: thread, to: posts, by: 4) {
                    guard let reply = try? client.call(make(index)) else { continue }
                    accepted.withLock { $0.append(reply.notification.id) }
                }
            }.start()
        }
        group.wait()
        return (accepted.withLock { $0 }, seconds(since: start))
    }
}
