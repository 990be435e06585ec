import Bus
import Foundation
import HubProtocol
import ServiceKit
import Testing

@Suite("Services as processes", .serialized)
struct FoundationEndToEndTests {
    @Test("every service starts on free ports, answers health, and exits 0 on SIGTERM")
    func startPingStop() throws {
        let cluster = try ServiceCluster()
        try cluster.startAll()
        for service in ServiceCluster.services {
            let health = try cluster.health(service)
            #expect(health.service == service)
            #expect(health.status == "ok")
            #expect(health.endpoints["requests"] == cluster.endpoint(service))
            #expect(health.pid == cluster.processes[service]?.processIdentifier)
        }
        // Each service keeps its own database in the data folder.
        for file in ["registry.db", "sync.db", "dispatch.db", "publish.db", "agent/agent.db"] {
            #expect(FileManager.default.fileExists(atPath: cluster.dataDirectory.appendingPathComponent(file).path), "\(file)")
        }
        for service in ServiceCluster.services {
            #expect(cluster.stop(service) == 0, "\(service) exit status\n\(cluster.log(service))")
            #expect(cluster.log(service).contains("msg=stopped"))
        }
    }

    @Test("nhctl health prints one line per service and exits 0 only when all are up")
    func nhctlHealth() throws {
        let cluster = try ServiceCluster()
        try cluster.startAll()
        let up = try cluster.runTool("nhctl", ["health"])
        #expect(up.status == 0, "\(up.output)\(up.error)")
        let lines = up.output.split(separator: "\n")
        #expect(lines.count == ServiceCluster.services.count)
        for service in ServiceCluster.services {
            #expect(lines.contains { $0.hasPrefix(service) && $0.contains(" ok ") }, "\(up.output)")
        }
        let json = try cluster.runTool("nhctl", ["health", "--json"])
        #expect(json.output.split(separator: "\n").allSatisfy { $0.hasPrefix("{") && $0.contains("\"status\":\"ok\"") })

        #expect(cluster.stop("nh-publish") == 0)
        let down = try cluster.runTool("nhctl", ["health", "--timeout", "300"])
        #expect(down.status == 1)
        #expect(down.output.split(separator: "\n").contains { $0.hasPrefix("nh-publish") && $0.contains("down") })
        cluster.stopAll()
    }

    @Test("bad frames on every bound socket get an error or are dropped, and the service stays up")
    func badInput() throws {
        let cluster = try ServiceCluster()
        try cluster.startAll()
        let requestSockets: [(service: String, variable: String)] = [
            ("nh-registry", "NH_REGISTRY_REQUESTS"), ("nh-sync", "NH_SYNC_REQUESTS"),
            ("nh-dispatch", "NH_DISPATCH_REQUESTS"),
            ("nh-publish", "NH_PUBLISH_REQUESTS"), ("nh-agent", "NH_AGENT_REQUESTS"), ("nh-gateway", "NH_GATEWAY_REQUESTS"),
        ]
        let cases: [(frames: [Data], code: ErrorCode)] = [
            ([Data([0xde, 0xad, 0xbe, 0xef, 0x00, 0x7f])], .malformedEnvelope),
            ([Data()], .emptyMessage),
            ([], .malformedFrames),
            ([Data(#"{"v":1,"type":"health","#.utf8), Data(#""id":"x","payload":{}}"#.utf8)], .malformedFrames),
            ([Data(#"{"v":1,"type":"no.such.type","id":"u-1","payload":{}}"#.utf8)], .unknownType),
            ([Data(#"{"v":99,"type":"health","id":"u-2","payload":{}}"#.utf8)], .unsupportedVersion),
        ]
        // The agent socket speaks CURVE and compact frames; its bad input is tested apart.
        let serverKey = try #require(BusKeys.publicKey(directory: cluster.dataDirectory))
        let busCurve = try cluster.curve()
        func curve(_ variable: String) -> (keys: CurveKeyPair, serverPublicKey: String)? {
            variable == "NH_AGENT_REQUESTS" ? try? cluster.agentCurve(cluster.environment[variable]!) : busCurve
        }
        let agentCases: [(frames: [Data], code: ErrorCode)] = [
            ([Data("garbage".utf8)], .malformedFrames),
            ([Data("hello\n2\nx".utf8)], .unsupportedVersion),
            ([Data("hello\n1".utf8)], .malformedFrames),
            ([Data("hello".utf8), Data("1".utf8), Data("x".utf8)], .malformedFrames),
            ([Data("deliver\na\nb\n\n1\n\n\n{}".utf8)], .unknownType),
            ([Data("ack\nsomeone-else/1".utf8)], .unauthorized),
            ([Data("hello\n1\nnot-registered".utf8)], .notFound),
            ([Data("ack\na\n!no tab here".utf8)], .malformedFrames),
        ]
        for (frames, code) in agentCases {
            let agent = try ZMQContext.shared.socket(.dealer)
            try agent.setReceiveTimeout(3_000)
            try agent.makeCurveClient(try CurveKeyPair.generate(), serverPublicKey: serverKey)
            try agent.connect(cluster.environment["NH_DISPATCH_AGENTS"]!)
            try agent.send(frames)
            let reply = try agent.receive()
            agent.close()
            guard let reply, reply.count == 1, case .error(let error) = try AgentWire.decode(reply[0]) else {
                Issue.record("no error frame for \(frames.map { String(decoding: $0, as: UTF8.self) })")
                continue
            }
            #expect(error.code == code, "agent channel: \(error.message)")
            #expect(!error.message.isEmpty)
        }
        // A client of the JSON envelope protocol is told what the channel speaks, in its own terms.
        let legacy = try RequestClient(
            connect: cluster.environment["NH_DISPATCH_AGENTS"]!, policy: RetryPolicy(timeout: 3_000, attempts: 1),
            curve: (try CurveKeyPair.generate(), serverKey))
        let legacyReply = try legacy.request([HubCodec.encode(AgentHello(installationId: "x"), id: "old")])
        legacy.close()
        #expect(try HubCodec.decode(ErrorReply.self, from: legacyReply[0]).payload.code == .unsupportedVersion)
        #expect(try cluster.health("nh-dispatch").status == "ok", "nh-dispatch after bad agent input")
        let plain = try RequestClient(
            connect: cluster.environment["NH_DISPATCH_AGENTS"]!, policy: RetryPolicy(timeout: 300, attempts: 1))
        #expect(throws: BusError.self, "a peer without CURVE cannot reach the agent socket") {
            try plain.request([HubCodec.encode(HealthRequest(), id: "plain")])
        }
        plain.close()
        for (service, variable) in requestSockets {
            let endpoint = cluster.environment[variable]!
            for (frames, code) in cases {
                let client = try RequestClient(connect: endpoint, policy: RetryPolicy(timeout: 2_000, attempts: 1), curve: curve(variable))
                let reply = try client.request(frames)
                client.close()
                #expect(reply.count == 1, "\(service) \(variable)")
                let error = try HubCodec.decode(ErrorReply.self, from: reply[0]).payload
                #expect(error.code == code, "\(service) on \(variable): \(error.message)")
                #expect(!error.message.isEmpty)
            }
            // A raw DEALER that skips the delimiter is answered too.
            let raw = try ZMQContext.shared.socket(.dealer)
            try raw.setReceiveTimeout(2_000)
            if let curve = curve(variable) { try raw.makeCurveClient(curve.keys, serverPublicKey: curve.serverPublicKey) }
            try raw.connect(endpoint)
            try raw.send(Data("garbage".utf8))
            let rawReply = try raw.receive()
            raw.close()
            #expect(rawReply.map { try? HubCodec.decode(ErrorReply.self, from: $0.last!).payload.code } == .malformedEnvelope)
            #expect(try cluster.health(service).status == "ok", "\(service) after bad input")
        }
        // Publishers do not read: a peer of the wrong socket type is refused at the handshake.
        for variable in ["NH_REGISTRY_EVENTS", "NH_SYNC_EVENTS"] {
            let intruder = try ZMQContext.shared.socket(.dealer)
            try intruder.connect(cluster.environment[variable]!)
            try intruder.send(Data("garbage".utf8), wait: false)
            Thread.sleep(forTimeInterval: 0.1)
            intruder.close()
        }
        for service in ServiceCluster.services {
            #expect(try cluster.health(service).status == "ok", "\(service) after bad input")
        }
        for service in ServiceCluster.services {
            #expect(cluster.stop(service) == 0, "\(service)\n\(cluster.log(service))")
        }
    }

    @Test("bad config stops a service at start with exit code 2 and a clear message")
    func badConfig() throws {
        let cluster = try ServiceCluster()
        let bad = try cluster.runTool("nh-registry", [], environment: ["NH_REGISTRY_REQUESTS": "localhost:7701"])
        #expect(bad.status == 2)
        #expect(bad.error.contains("must start with tcp://"))
        let unknownOption = try cluster.runTool("nh-sync", ["--colour"])
        #expect(unknownOption.status == 2)
        #expect(unknownOption.error.contains("unknown option --colour"))
        let help = try cluster.runTool("nh-dispatch", ["--help"])
        #expect(help.status == 0)
        #expect(help.output.contains("NH_DATA_DIR"))
    }

    @Test("a service restarted on the same data folder opens its store again")
    func restart() throws {
        let cluster = try ServiceCluster()
        try cluster.start("nh-registry")
        try cluster.waitHealthy("nh-registry")
        #expect(cluster.stop("nh-registry") == 0)
        try cluster.start("nh-registry")
        try cluster.waitHealthy("nh-registry")
        #expect(cluster.stop("nh-registry") == 0)
        #expect(cluster.log("nh-registry").components(separatedBy: "msg=\"store open\"").count == 3)
    }
}
