import Auth
import Bus
import Foundation
import HubProtocol
import Storage
import Testing

@testable import ServiceKit

/// What a service holds to check and make credentials, loaded once at start: the keys, the
/// user-token secret and the bus's security, each a `ConfigError` when its file cannot be read.
@Suite("Service context's keys")
struct ServiceContextTests {
    static func config() throws -> HubConfig {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-context-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var config = HubConfig()
        config.dataDir = folder.path
        return config
    }

    @Test("a first start makes the keys; the next reads the same ones and signs the same service token")
    func keysMadeOnceAndKept() throws {
        let config = try Self.config()
        let first = try ServiceContext.detached(name: "nh-test", config: config)
        let second = try ServiceContext.detached(name: "nh-test", config: config)
        #expect(first.keys == second.keys)
        #expect(first.serviceToken() != nil)
        let (credential, _) = first.userTokens.issue(user: "alice", kind: .token, lifetime: 60)
        #expect(try second.authorizeUser(credential, hub: nil).key == "alice")
    }

    @Test("a key file that exists but cannot be read is a config error, and nothing is made in its place")
    func unreadableKeysAreAConfigError() throws {
        for (file, words) in [("keys.json", "cannot load the hub's keys"), ("user-token.key", "cannot load the user-token secret")] {
            let config = try Self.config()
            let path = URL(fileURLWithPath: config.dataDir).appendingPathComponent(file)
            try Data("not a key file".utf8).write(to: path)
            #expect {
                _ = try ServiceContext.detached(name: "nh-test", config: config)
            } throws: { error in
                (error as? ConfigError)?.description.contains(words) == true
            }
            #expect(try Data(contentsOf: path) == Data("not a key file".utf8))
        }
    }

    @Test("prepareKeys secures the context's bus with the hub's key and admits every access key's client key")
    func prepareKeysSecuresTheBus() throws {
        let config = try Self.config()
        let context = try ServiceContext.detached(name: "nh-test", config: config)
        #expect(context.bus.security == nil)
        try context.prepareKeys()
        defer { context.shutdown() }
        let bus = try #require(context.bus.security)
        #expect(bus.serverKeys?.publicKey == BusKeys.publicKey(directory: URL(fileURLWithPath: config.dataDir)))
        for key in context.keys.keys {
            #expect(bus.admits(domain: "hub", key: try BusSecurity.clientKeys(keyName: key.name, key: key.key).publicKey))
        }
        #expect(!bus.admits(domain: "hub", key: try CurveKeyPair.generate().publicKey))
    }

    @Test("a bus key file that cannot be read stops prepareKeys with a config error")
    func unreadableBusKey() throws {
        let config = try Self.config()
        let context = try ServiceContext.detached(name: "nh-test", config: config)
        try Data("{}".utf8).write(to: URL(fileURLWithPath: config.dataDir).appendingPathComponent(BusKeys.fileName))
        #expect {
            try context.prepareKeys()
        } throws: { error in
            (error as? ConfigError)?.description.contains("cannot load the hub's bus key") == true
        }
        #expect(context.bus.security == nil)
    }
}

@Suite("Following a stream in batches")
struct FollowBatchesTests {
    @Test("a stream read in batches of at most the limit gets every message, in order; the rest wait on the socket for the loop's next pass")
    func batchesUpToTheLimit() throws {
        let context = try ServiceContext.detached(name: "nh-test", config: try ServiceContextTests.config())
        defer { context.shutdown() }
        let publisher = try SequencedPublisher(bind: ["tcp://127.0.0.1:*"], startingAfter: 0)
        defer { publisher.close() }
        let count = 1_000, limit = 64
        var batches: [[SequencedMessage]] = []
        var published = false
        try context.bus.followBatches(try #require(publisher.endpoints.first), limit: limit) { batch in
            batches.append(batch)
            if batches.flatMap({ $0 }).filter({ !$0.isHeartbeat }).count == count { context.loop.stop() }
        }
        let started = ContinuousClock.now
        context.loop.every(milliseconds: 5) {
            // Heartbeats until the subscription has joined, then every message at once, so that they wait together.
            if batches.isEmpty {
                try publisher.heartbeat()
            } else if !published {
                published = true
                for index in 0..<count { _ = try publisher.publish(topic: "n", body: Data("\(index)".utf8)) }
            }
            if started.duration(to: .now) > .seconds(30) { context.loop.stop() }
        }
        try context.loop.run()
        let messages = batches.flatMap { $0 }.filter { !$0.isHeartbeat }
        #expect(messages.map { String(decoding: $0.body, as: UTF8.self) } == (0..<count).map(String.init))
        #expect(batches.allSatisfy { $0.count <= limit })
        #expect(batches.contains { $0.count == limit }, "messages waiting together are read a limit's worth at a time")
    }
}

@Suite("Loopback endpoints")
struct LoopbackEnvironmentTests {
    @Test("free endpoints handed out in one process are each different, so hubs started side by side never share a port")
    func endpointsAreNotHandedOutTwice() throws {
        let endpoints = try (0..<400).map { _ in try LoopbackEnvironment.freeEndpoint() }
        #expect(Set(endpoints).count == endpoints.count)
        #expect(endpoints.allSatisfy { $0.hasPrefix("tcp://127.0.0.1:") })
    }
}

/// The parts a context is made of, each used on its own: the store opener and the bus factory.
@Suite("Store opener and bus factory")
struct ServiceContextPartsTests {
    @Test("the opener makes and migrates a file in the data folder, and closes it at shutdown")
    func opensInTheDataFolder() throws {
        let context = try ServiceContext.detached(name: "nh-test", config: try ServiceContextTests.config())
        let database = try context.stores.open("parts.db", migrations: [Migration(version: 1, "CREATE TABLE t (id INTEGER PRIMARY KEY)")])
        #expect(FileManager.default.fileExists(atPath: context.dataDirectory.appendingPathComponent("parts.db").path))
        #expect(try database.schemaVersion == 1)
        context.shutdown()
        #expect(throws: (any Error).self) { _ = try database.schemaVersion }
    }

    @Test("the engine is chosen by the store setting; a PostgreSQL store that cannot be used is a config error")
    func choosesTheEngine() throws {
        var config = try ServiceContextTests.config()
        let plain = try ServiceContext.detached(name: "nh-test", config: config)
        #expect(try plain.stores.choose(schema: "s", postgres: { _ in "postgres" }, sqlite: { "sqlite" }) == "sqlite")
        config.store = "postgresql://127.0.0.1:1/nh"
        let postgres = try ServiceContext.detached(name: "nh-test", config: config)
        #expect(try postgres.stores.choose(schema: "s", postgres: { $0 }, sqlite: { "sqlite" }) == "postgresql://127.0.0.1:1/nh")
        #expect {
            _ = try postgres.stores.choose(schema: "s", postgres: { _ -> String in throw HubError(.unavailable, "refused") }, sqlite: { "sqlite" })
        } throws: { error in
            (error as? ConfigError)?.description.contains("cannot use the PostgreSQL store") == true
        }
    }

    @Test("a bound request server answers health and metrics for the runtime, with numeric details as gauges")
    func requestServerAnswersHealth() throws {
        let context = try ServiceContext.detached(name: "nh-test", config: try ServiceContextTests.config())
        let endpoint = try LoopbackEnvironment.freeEndpoint()
        _ = try context.bus.bindRequests(endpoint, endpoints: { ["requests": endpoint] }, details: { ["queueDepth": "7", "state": "ready"] })
        let client = try context.bus.client(endpoint, policy: RetryPolicy(timeout: 5_000, attempts: 1))
        let stopped = DispatchSemaphore(value: 0)
        // The loop is handed to its thread before it runs, and read there only.
        nonisolated(unsafe) let loop = context.loop
        let thread = Thread {
            try? loop.run()
            stopped.signal()
        }
        thread.start()
        defer {
            context.loop.stop()
            stopped.wait()
            context.shutdown()
        }
        let health = try client.call(HealthRequest())
        #expect(health.service == "nh-test")
        #expect(health.endpoints == ["requests": endpoint])
        #expect(health.details?["state"] == "ready")
        let metrics = try client.call(MetricsRequest())
        #expect(metrics.service == "nh-test")
        #expect(metrics.samples["nh_queue_depth"] == 7)
        #expect(metrics.samples["nh_state"] == nil, "only numbers become gauges")
        #expect(context.bus.security == nil, "plain sockets until the bus is secured")
    }

    @Test("a health figure that cannot be read says why, instead of a zero")
    func unreadableFigure() {
        #expect(ServiceRuntime.figure { 12 } == "12")
        #expect(ServiceRuntime.figure { throw HubError(.unavailable, "the store is closed") }.hasPrefix("unreadable: "))
        #expect(ServiceRuntime.figure { throw HubError(.unavailable, "the store is closed") }.contains("the store is closed"))
    }
}

@Suite("Refused envelopes")
struct BestEffortIDTests {
    @Test("a refused envelope's id is read back however deep its other members nest, so the error reply correlates")
    func deepEnvelopes() {
        let deep = String(repeating: "[", count: 400) + String(repeating: "]", count: 400)
        #expect(HubServer.bestEffortID(Data(#"{"v":1,"type":"health","id":"r-1","payload":{},"auth":\#(deep)}"#.utf8)) == "r-1")
        #expect(HubServer.bestEffortID(Data(#"{"v":1,"id":7}"#.utf8)) == "")
        #expect(HubServer.bestEffortID(Data("not json".utf8)) == "")
    }
}
