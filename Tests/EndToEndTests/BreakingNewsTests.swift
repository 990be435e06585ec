import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Testing

/// The flow of the breaking-news documents: devices choose categories, a backend sends a template
/// notification to a category, and only the devices that chose it get it, rendered from their own template.
@Suite("Breaking news", .serialized)
struct BreakingNewsTests {
    static let categories = ["World", "Politics", "Business", "Technology", "Science", "Sports"]

    /// A running agent with its own home folder, control endpoint and standard output.
    struct Agent {
        let name: String
        let home: URL
        let control: String
        let output: URL

        func lines() -> [[String: Any]] { jsonLines(output) }

        func alerts() -> [String] {
            lines().compactMap { line in
                let payload = line["payload"] as? [String: Any]
                return ((payload?["aps"] as? [String: Any])?["alert"] as? String) ?? (payload?["message"] as? String)
            }
        }
    }

    final class Hub {
        let cluster: ServiceCluster
        var agents: [String: Agent] = [:]

        init() throws {
            cluster = try ServiceCluster()
            for service in ["nh-registry", "nh-dispatch", "nh-publish"] { try cluster.start(service) }
            for service in ["nh-registry", "nh-dispatch", "nh-publish"] { try cluster.waitHealthy(service) }
        }

        func agentEnvironment(_ agent: Agent, template: String) -> [String: String] {
            ["NH_AGENT_HOME": agent.home.path, "NH_AGENT_REQUESTS": agent.control, "NH_AGENT_TEMPLATE": template]
        }

        /// Stores the agent's categories with `nh-agent subscribe`, then starts it.
        @discardableResult
        func startAgent(_ name: String, categories: [String], template: String) throws -> Agent {
            let control = try ServiceCluster.freeEndpoint()
            let agent = agents[name] ?? Agent(
                name: name, home: cluster.dataDirectory.appendingPathComponent("agent-\(name)"),
                control: control, output: cluster.dataDirectory.appendingPathComponent("agent-\(name).jsonl"))
            agents[name] = agent
            if !categories.isEmpty {
                let result = try cluster.runTool("nh-agent", ["subscribe"] + categories, environment: agentEnvironment(agent, template: template))
                #expect(result.status == 0, "\(result.error)")
            }
            try cluster.start("nh-agent", as: "agent-\(name)", environment: agentEnvironment(agent, template: template), stdout: agent.output)
            let health = try cluster.waitHealthy("nh-agent", endpoint: agent.control)
            #expect(cluster.waitUntil { (try? cluster.health("nh-agent", endpoint: agent.control).details?["registered"]) == "true" })
            _ = health
            return agent
        }

        func dispatcherDetails() -> [String: String] {
            (try? cluster.health("nh-dispatch").details) ?? [:]
        }

        /// Waits until the dispatcher knows `installations` and has `agents` connected.
        func waitForDispatcher(installations: Int, agents: Int) {
            let ready = cluster.waitUntil {
                let details = dispatcherDetails()
                return details["installations"] == String(installations) && details["agents"] == String(agents)
            }
            #expect(ready, "dispatcher: \(dispatcherDetails())")
        }

        func send(_ request: SendNotification, keyName: String = AccessKey.defaultFullName) throws -> String {
            let client = try cluster.client(cluster.endpoint("nh-publish"), keyName: keyName)
            defer { client.close() }
            return try client.call(request).notificationId
        }

        func outcome(_ id: String) throws -> NotificationOutcome? {
            let client = try cluster.client(cluster.endpoint("nh-dispatch"))
            defer { client.close() }
            do {
                return try client.call(OutcomeRequest(notificationId: id))
            } catch let error as HubError where error.code == .notFound {
                return nil
            }
        }

        /// Waits until every notification is processed and each of its deliveries acknowledged.
        func waitSettled(_ ids: [String]) {
            let settled = cluster.waitUntil {
                ids.allSatisfy { id in
                    guard let outcome = try? outcome(id) else { return false }
                    return outcome.state != .enqueued && outcome.acknowledged == outcome.targets
                }
            }
            #expect(settled, "outcomes: \(ids.map { (try? outcome($0)).map { "\($0)" } ?? "none" })")
        }
    }

    static let seedTemplate = #"{"aps":{"alert":"$(messageParam)"}}"#
    static let otherTemplate = #"{"message":"$(messageParam)","category":"news"}"#

    @Test("each agent gets exactly the categories it chose, rendered from its own template; expressions and broadcast")
    func categoriesAndExpressions() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let a = try hub.startAgent("A", categories: ["World", "Sports"], template: Self.seedTemplate)
        let b = try hub.startAgent("B", categories: ["Politics"], template: Self.otherTemplate)
        let c = try hub.startAgent("C", categories: [], template: Self.otherTemplate)
        hub.waitForDispatcher(installations: 3, agents: 3)

        var ids: [String] = []
        for category in Self.categories {
            ids.append(try hub.send(SendNotification(
                format: .template, properties: ["messageParam": "Breaking \(category) News!"], tagExpression: category)))
        }
        hub.waitSettled(ids)
        // Sent one at a time, each came whole on the publish service's stream, next after the
        // cursor: planned from there, with no pull (only a pull on its way at that moment brings one).
        let planned = hub.dispatcherDetails()
        #expect(Int(planned["streamedTotal"] ?? "") ?? 0 >= ids.count - 1, "\(planned)")
        #expect(a.alerts().sorted() == ["Breaking Sports News!", "Breaking World News!"])
        #expect(a.lines().allSatisfy { ($0["payload"] as? [String: Any])?["aps"] != nil }, "A renders the seed's template")
        #expect(b.alerts() == ["Breaking Politics News!"])
        #expect((b.lines().first?["payload"] as? [String: Any])?["category"] as? String == "news")
        #expect(c.lines().isEmpty)
        let targets = try ids.map { try hub.outcome($0)?.targets ?? -1 }
        #expect(targets == [1, 1, 0, 0, 0, 1])
        #expect(try hub.outcome(ids[2])?.state == .noTargetFound)

        // World && !Sports: A has both, so nobody. (Politics || Science): B. No tag: everyone.
        let notSports = try hub.send(SendNotification(format: .template, properties: ["messageParam": "w"], tagExpression: "World && !Sports"))
        let either = try hub.send(SendNotification(format: .template, properties: ["messageParam": "ps"], tagExpression: "(Politics || Science)"))
        let everyone = try hub.send(SendNotification(format: .template, properties: ["messageParam": "all"]))
        let onlyC = try hub.send(SendNotification(
            format: .template, properties: ["messageParam": "c"], tagExpression: "!World && !Politics"))
        hub.waitSettled([notSports, either, everyone, onlyC])
        #expect(try hub.outcome(notSports)?.targets == 0)
        #expect(try hub.outcome(either)?.targets == 1)
        #expect(try hub.outcome(everyone)?.targets == 3)
        #expect(try hub.outcome(onlyC)?.targets == 1)
        #expect(a.alerts().sorted() == ["Breaking Sports News!", "Breaking World News!", "all"])
        #expect(b.alerts() == ["Breaking Politics News!", "ps", "all"])
        #expect(c.alerts() == ["all", "c"])

        // Each delivery appears once on each agent's output.
        for agent in [a, b, c] {
            let deliveries = agent.lines().compactMap { $0["deliveryId"] as? String }
            #expect(Set(deliveries).count == deliveries.count)
        }
    }

    @Test("an agent that stops is counted gone at once; offline at send time, it catches up when it comes back, once, and not again after a restart")
    func offlineCatchUp() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let b = try hub.startAgent("B", categories: ["Politics"], template: Self.otherTemplate)
        hub.waitForDispatcher(installations: 1, agents: 1)
        #expect(hub.cluster.stop("agent-B") == 0)
        // It said bye as it stopped: its session ends at once, not after three heartbeats (90 s).
        hub.waitForDispatcher(installations: 1, agents: 0)
        #expect(hub.dispatcherDetails()["sessionsEndedLeftTotal"] == "1")
        #expect(hub.dispatcherDetails()["sessionsEndedSilentTotal"] == "0")
        let missed = try hub.send(SendNotification(format: .template, properties: ["messageParam": "while away"], tagExpression: "Politics"))
        #expect(hub.cluster.waitUntil { (try? hub.outcome(missed))?.targets == 1 })
        #expect(try hub.outcome(missed)?.acknowledged == 0)
        #expect(b.lines().isEmpty)

        try hub.startAgent("B", categories: [], template: Self.otherTemplate)
        hub.waitSettled([missed])
        #expect(b.alerts() == ["while away"])

        // Restarting again, and a retried send with the same idempotency key, show nothing twice.
        #expect(hub.cluster.stop("agent-B") == 0)
        try hub.startAgent("B", categories: [], template: Self.otherTemplate)
        let first = try hub.send(SendNotification(idempotencyKey: "k-1", format: .template, properties: ["messageParam": "once"], tagExpression: "Politics"))
        let retry = try hub.send(SendNotification(idempotencyKey: "k-1", format: .template, properties: ["messageParam": "once"], tagExpression: "Politics"))
        #expect(first == retry)
        hub.waitSettled([first])
        Thread.sleep(forTimeInterval: 0.5)
        #expect(b.alerts() == ["while away", "once"])
        #expect(try hub.cluster.runTool("nh-agent", ["categories"], environment: ["NH_AGENT_HOME": b.home.path]).output == "Politics\n")
    }

    @Test("subscribing while the agent runs registers again at once")
    func subscribeWhileRunning() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let a = try hub.startAgent("A", categories: ["World"], template: Self.seedTemplate)
        hub.waitForDispatcher(installations: 1, agents: 1)
        let result = try hub.cluster.runTool("nh-agent", ["subscribe", "Science"], environment: hub.agentEnvironment(a, template: Self.seedTemplate))
        #expect(result.output.contains("registered again"), "\(result.output)\(result.error)")
        let registry = try hub.cluster.client(hub.cluster.endpoint("nh-registry"))
        defer { registry.close() }
        let id = try hub.cluster.runTool("nh-agent", ["id"], environment: ["NH_AGENT_HOME": a.home.path]).output
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try registry.call(InstallationGet(installationId: id)).installation.tags == ["World", "Science"])
        #expect(hub.cluster.waitUntil {
            (try? hub.send(SendNotification(format: .template, properties: ["messageParam": "sci"], tagExpression: "Science")))
                .flatMap { try? hub.outcome($0) }.map { $0.targets == 1 } ?? false
        })
    }

    @Test("a listen key can register but cannot send; bad input gets a clear error and changes nothing")
    func keysAndBadInput() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let send = SendNotification(format: .template, properties: ["messageParam": "x"], tagExpression: "World")
        #expect(errorCode { try hub.send(send, keyName: AccessKey.defaultListenName) } == .forbidden)
        let anonymous = try HubClient(connect: hub.cluster.endpoint("nh-publish"), policy: RetryPolicy(timeout: 3_000, attempts: 1), curve: try hub.cluster.curve())
        #expect(errorCode { try anonymous.call(send) } == .unauthorized)
        anonymous.close()

        let registry = try hub.cluster.client(hub.cluster.endpoint("nh-registry"), keyName: AccessKey.defaultListenName)
        defer { registry.close() }
        let good = Installation(installationId: "dev-1", pushChannel: "dev-1", tags: ["World"],
                                templates: ["t": InstallationTemplate(body: Self.seedTemplate)])
        #expect(try registry.call(InstallationUpsert(installation: good)).installation.tags == ["World"])
        var badTag = good
        badTag.tags = ["Breaking News"]
        #expect(errorCode { try registry.call(InstallationUpsert(installation: badTag)) } == .invalidTag)
        var tooMany = good
        tooMany.tags = (1...61).map { "t\($0)" }
        #expect(errorCode { try registry.call(InstallationUpsert(installation: tooMany)) } == .invalidTag)
        var badTemplate = good
        badTemplate.templates = ["t": InstallationTemplate(body: #"{"aps":{"alert":"$(messageParam"}}"#)]
        #expect(errorCode { try registry.call(InstallationUpsert(installation: badTemplate)) } == .invalidTemplate)
        var notJSON = good
        notJSON.templates = ["t": InstallationTemplate(body: "alert: $(messageParam)")]
        #expect(errorCode { try registry.call(InstallationUpsert(installation: notJSON)) } == .invalidTemplate)
        #expect(try registry.call(InstallationGet(installationId: "dev-1")).installation.tags == ["World"])
        #expect(errorCode { try registry.call(InstallationList()) } == .forbidden)

        // Patch: add and remove tags, replace the push channel; a bad operation changes nothing.
        let patched = try registry.call(InstallationPatch(installationId: "dev-1", operations: [
            PatchOperation(op: "add", path: "/tags", value: .string("Sports")),
            PatchOperation(op: "remove", path: "/tags/World"),
            PatchOperation(op: "replace", path: "/pushChannel", value: .string("dev-1b")),
        ])).installation
        #expect(patched.tags == ["Sports"])
        #expect(patched.pushChannel == "dev-1b")
        #expect(errorCode { try registry.call(InstallationPatch(installationId: "dev-1", operations: [
            PatchOperation(op: "add", path: "/tags", value: .string("ok")), PatchOperation(op: "move", path: "/tags"),
        ])) } == .invalidArgument)
        #expect(try registry.call(InstallationGet(installationId: "dev-1")).installation.tags == ["Sports"])

        for (bad, expected) in [
            (SendNotification(format: .template, properties: ["m": "x"], tagExpression: "World &&"), ErrorCode.invalidExpression),
            (SendNotification(format: .template, properties: ["m": "x"], tagExpression: "a && b && c && d && e && f && g"), .invalidExpression),
            (SendNotification(format: .native, body: "not json"), .invalidPayload),
            (SendNotification(format: .template), .invalidPayload),
            (SendNotification(format: .native, body: "{\"a\":\"" + String(repeating: "x", count: 70_000) + "\"}"), .payloadTooLarge),
            (SendNotification(format: .template, properties: ["m": "x"], timeToLive: 0), .invalidArgument),
            (SendNotification(format: .template, properties: ["m": "x"], tagExpression: "a", userId: "u"), .invalidArgument),
        ] {
            #expect(errorCode { try hub.send(bad) } == expected, "\(bad)")
        }
        // A non-string property value and an unknown field, on the raw wire.
        let key = try hub.cluster.keys().key(named: AccessKey.defaultFullName)!
        let token = ConnectionString(endpoint: "http://127.0.0.1:7780/", keyName: key.name, key: key.key).token(for: "http://127.0.0.1:7780/hub")
        for (payload, expected) in [
            (#"{"format":"template","properties":{"messageParam":5}}"#, ErrorCode.invalidPayload),
            (#"{"format":"template","properties":{"m":"x"},"colour":"red"}"#, .unknownField),
            (#"{"format":"smoke","properties":{"m":"x"}}"#, .invalidPayload),
        ] {
            let raw = try RequestClient(connect: hub.cluster.endpoint("nh-publish"), policy: RetryPolicy(timeout: 3_000, attempts: 1), curve: try hub.cluster.curve())
            let envelope = #"{"v":1,"type":"notification.send","id":"raw","auth":"\#(token)","payload":\#(payload)}"#
            let reply = try raw.request([Data(envelope.utf8)])
            raw.close()
            #expect(try HubCodec.decode(ErrorReply.self, from: reply[0]).payload.code == expected, "\(payload)")
        }
        let publishLatest = try hub.cluster.health("nh-publish").details?["latest"]
        #expect(publishLatest == "0", "no refused send was accepted")
    }

    @Test("installations list a page at a time, filtered by tag; an expired one stops receiving and is purged")
    func listingAndExpiry() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let registry = try hub.cluster.client(hub.cluster.endpoint("nh-registry"))
        defer { registry.close() }
        for index in 1...5 {
            _ = try registry.call(InstallationUpsert(installation: Installation(
                installationId: "dev-\(index)", pushChannel: "dev-\(index)", tags: index % 2 == 0 ? ["Even"] : ["Odd"],
                templates: ["t": InstallationTemplate(body: Self.seedTemplate)])))
        }
        let first = try registry.call(InstallationList(limit: 2))
        #expect(first.installations.map(\.installationId) == ["dev-1", "dev-2"])
        let second = try registry.call(InstallationList(limit: 2, after: first.next))
        #expect(second.installations.map(\.installationId) == ["dev-3", "dev-4"])
        let last = try registry.call(InstallationList(limit: 2, after: second.next))
        #expect(last.installations.map(\.installationId) == ["dev-5"])
        #expect(last.next == nil)
        #expect(try registry.call(InstallationList(tag: "Even")).installations.map(\.installationId) == ["dev-2", "dev-4"])

        _ = try registry.call(InstallationUpsert(installation: Installation(
            installationId: "brief", pushChannel: "brief", tags: ["Brief"],
            templates: ["t": InstallationTemplate(body: Self.seedTemplate)], expirationTime: Date().addingTimeInterval(1.5))))
        hub.waitForDispatcher(installations: 6, agents: 0)
        let before = try hub.send(SendNotification(format: .template, properties: ["messageParam": "x"], tagExpression: "Brief"))
        #expect(hub.cluster.waitUntil { (try? hub.outcome(before))?.targets == 1 })
        Thread.sleep(forTimeInterval: 1.6)
        let after = try hub.send(SendNotification(format: .template, properties: ["messageParam": "x"], tagExpression: "Brief"))
        #expect(hub.cluster.waitUntil { (try? hub.outcome(after))?.state == .noTargetFound })
        #expect(throws: HubError.self) { try registry.call(InstallationGet(installationId: "brief")) }
        // The purge removes it from the store and from the dispatcher's copy.
        hub.waitForDispatcher(installations: 5, agents: 0)
        #expect(try registry.call(InstallationDelete(installationId: "dev-5")) == Ack())
        #expect(throws: HubError.self) { try registry.call(InstallationDelete(installationId: "dev-5")) }
        hub.waitForDispatcher(installations: 4, agents: 0)
    }

    @Test("the hook gets each notification on standard input and in its environment")
    func hook() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let captured = hub.cluster.dataDirectory.appendingPathComponent("hook.txt")
        let control = try ServiceCluster.freeEndpoint()
        let agent = Agent(name: "H", home: hub.cluster.dataDirectory.appendingPathComponent("agent-H"), control: control,
                          output: hub.cluster.dataDirectory.appendingPathComponent("agent-H.jsonl"))
        var environment = hub.agentEnvironment(agent, template: Self.seedTemplate)
        environment["NH_AGENT_HOOK"] = "printf '%s|' \"$NH_NOTIFICATION_ID\" >> \(captured.path); cat >> \(captured.path)"
        _ = try hub.cluster.runTool("nh-agent", ["subscribe", "World"], environment: environment)
        try hub.cluster.start("nh-agent", as: "agent-H", environment: environment, stdout: agent.output)
        try hub.cluster.waitHealthy("nh-agent", endpoint: control)
        hub.waitForDispatcher(installations: 1, agents: 1)
        let id = try hub.send(SendNotification(format: .template, properties: ["messageParam": "hooked"], tagExpression: "World"))
        hub.waitSettled([id])
        #expect(hub.cluster.waitUntil { ((try? String(contentsOf: captured, encoding: .utf8)) ?? "").contains("hooked") })
        let text = (try? String(contentsOf: captured, encoding: .utf8)) ?? ""
        #expect(text.hasPrefix("\(id)|{"))
        #expect(text.contains(#""alert":"hooked""#))
    }

    @Test("the bus is CURVE: an agent with the wrong hub key reaches neither the registry nor the dispatcher")
    func agentChannelKeys() throws {
        let hub = try Hub()
        defer { hub.cluster.stopAll() }
        let impostor = Agent(
            name: "X", home: hub.cluster.dataDirectory.appendingPathComponent("agent-X"), control: try ServiceCluster.freeEndpoint(),
            output: hub.cluster.dataDirectory.appendingPathComponent("agent-X.jsonl"))
        var environment = hub.agentEnvironment(impostor, template: Self.seedTemplate)
        environment["NH_BUS_SERVER_KEY"] = try CurveKeyPair.generate().publicKey
        try hub.cluster.start("nh-agent", as: "agent-X", environment: environment, stdout: impostor.output)
        try hub.cluster.waitHealthy("nh-agent", endpoint: impostor.control)
        Thread.sleep(forTimeInterval: 1)
        #expect(hub.dispatcherDetails()["installations"] == "0")
        #expect(hub.dispatcherDetails()["agents"] == "0")
        try hub.startAgent("A", categories: ["World"], template: Self.seedTemplate)
        hub.waitForDispatcher(installations: 1, agents: 1)
        let keys = try hub.cluster.runTool("nhctl", ["keys"])
        #expect(keys.output.contains(try #require(BusKeys.publicKey(directory: hub.cluster.dataDirectory))))
    }
}
