import Foundation
import ServiceKit
import Testing

@Suite("Config")
struct ConfigLoaderTests {
    func file(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("nh-config-\(UUID().uuidString).json").path
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test("defaults need nothing")
    func defaults() throws {
        let config = try ConfigLoader.load(file: nil, environment: [:])
        #expect(config == HubConfig())
        #expect(config.registry.requests == "tcp://127.0.0.1:7701")
    }

    @Test("a file overrides defaults, and the environment overrides the file")
    func layering() throws {
        let path = try file(#"{"dataDir": "/srv/nh", "logLevel": "debug", "registry": {"requests": "tcp://127.0.0.1:9001"}}"#)
        let config = try ConfigLoader.load(
            file: path, environment: ["NH_DATA_DIR": "/var/lib/nh", "NH_SYNC_EVENTS": "ipc:///tmp/sync.events",
                                      "NH_REQUEST_TIMEOUT_MS": "750", "UNRELATED": "x"])
        #expect(config.dataDir == "/var/lib/nh")
        #expect(config.logLevel == "debug")
        #expect(config.registry.requests == "tcp://127.0.0.1:9001")
        #expect(config.registry.events == "tcp://127.0.0.1:7702")
        #expect(config.sync.events == "ipc:///tmp/sync.events")
        #expect(config.requestTimeoutMs == 750)
    }

    @Test("variable names follow the field path")
    func names() {
        #expect(ConfigLoader.variableName(["dataDir"]) == "NH_DATA_DIR")
        #expect(ConfigLoader.variableName(["registry", "requests"]) == "NH_REGISTRY_REQUESTS")
        #expect(ConfigLoader.variableName(["maxMessageBytes"]) == "NH_MAX_MESSAGE_BYTES")
    }

    @Test("bad config is refused with a message that names the problem", arguments: [
        (#"{"dataDir": 5}"#, [String: String](), "wrong type"),
        (#"{"colour": "blue"}"#, [:], "unknown setting 'colour'"),
        (#"{"registry": {"port": 1}}"#, [:], "unknown setting 'registry.port'"),
        ("not json", [:], "not valid JSON"),
        ("[]", [:], "JSON object"),
        ("{}", ["NH_LOG_LEVEL": "loud"], "logLevel 'loud'"),
        ("{}", ["NH_REQUEST_ATTEMPTS": "many"], "NH_REQUEST_ATTEMPTS='many' must be an integer"),
        ("{}", ["NH_REGISTRY_REQUESTS": "127.0.0.1:7701"], "must start with tcp://"),
        ("{}", ["NH_PUBLISH_REQUESTS": "tcp://127.0.0.1"], "needs a port"),
        ("{}", ["NH_MAX_MESSAGE_BYTES": "10"], "maxMessageBytes"),
        ("{}", ["NH_DISPATCH_REQUESTS": "tcp://10.0.0.11:7721,tcp://10.0.0.12:7721"],
         "dispatch.requests (NH_DISPATCH_REQUESTS) 'tcp://10.0.0.11:7721,tcp://10.0.0.12:7721' is a list"),
        (#"{"publish": {"events": "tcp://a:1 tcp://b:2"}}"#, [:], "publish.events (NH_PUBLISH_EVENTS)"),
        ("{}", ["NH_DISPATCH_AGENTS": "tcp://a:1,tcp://b"], "dispatch.agents (NH_DISPATCH_AGENTS): nh-dispatch endpoint 'tcp://b' needs a port"),
    ])
    func refused(text: String, environment: [String: String], expected: String) throws {
        let path = try file(text)
        do {
            _ = try ConfigLoader.load(file: path, environment: environment)
            Issue.record("config should be refused")
        } catch {
            #expect(error.description.contains(expected), "\(error.description)")
        }
    }

    @Test("a missing config file is an error, not a silent default")
    func missingFile() {
        #expect(throws: ConfigError.self) { try ConfigLoader.load(file: "/nonexistent/nh.json", environment: [:]) }
    }

    @Test("the dispatchers an agent may use come from dispatch.agents, one or several")
    func dispatcherList() {
        #expect(HubConfig.dispatcherEndpoints(nil) == ["tcp://127.0.0.1:7722"])
        #expect(HubConfig.dispatcherEndpoints("tcp://a:1, tcp://b:2,") == ["tcp://a:1", "tcp://b:2"])
    }

    @Test("an agent's transport heartbeats: every agent heartbeat, answered within three or 10 s more; with several dispatchers, every lease, answered within one")
    func transportHeartbeat() {
        #expect(HubConfig().agentHeartbeatMs == 30_000)
        // (agentHeartbeatMs, heartbeatMs, dispatchers) → (interval, timeout). With one, the agent's
        // heartbeat, answered within three or 10 s more; with several, a ping every lease period
        // (three service heartbeats, at least 3 s) unless the agent's heartbeat is shorter, and a
        // lease to answer.
        let cases: [(Int, Int, Int, Int, Int)] = [
            (30_000, 1_000, 1, 30_000, 40_000), (5_000, 1_000, 1, 5_000, 15_000), (1_000, 1_000, 1, 1_000, 3_000),
            (30_000, 1_000, 2, 3_000, 3_000), (30_000, 500, 2, 3_000, 3_000), (30_000, 2_000, 3, 6_000, 6_000),
            (500, 2_000, 2, 500, 6_000),
        ]
        for (agent, service, dispatchers, interval, timeout) in cases {
            var config = HubConfig()
            config.agentHeartbeatMs = agent
            config.heartbeatMs = service
            #expect(config.leasePeriodMs == max(3_000, 3 * service))
            #expect(config.agentTransportHeartbeat(dispatchers: dispatchers) == (interval, timeout), "\(agent), \(service), \(dispatchers)")
        }
    }

    @Test("outcomes are read from dispatch.requests, then dispatch.peers; peers belong to the dispatch section")
    func outcomePeers() throws {
        #expect(HubConfig().outcomeEndpoints == ["tcp://127.0.0.1:7721"])
        let config = try ConfigLoader.load(file: nil, environment: ["NH_DISPATCH_PEERS": "tcp://b:7721, tcp://c:7721"])
        #expect(config.outcomeEndpoints == ["tcp://127.0.0.1:7721", "tcp://b:7721", "tcp://c:7721"])
        #expect(throws: ConfigError("nh-registry: peers is a dispatcher's setting (dispatch.peers)")) {
            try ConfigLoader.load(file: nil, environment: ["NH_REGISTRY_PEERS": "tcp://b:7701"])
        }
        #expect(throws: ConfigError.self) { try ConfigLoader.load(file: nil, environment: ["NH_DISPATCH_PEERS": "tcp://b:7721,b:7721"]) }
    }
}
