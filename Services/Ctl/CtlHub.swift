import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit

/// nhctl hub: the namespace's hubs, made, listed, deleted; their policies and keys. Every command
/// here needs a namespace key (the data folder's `namespace-keys.json`, or its connection string).
enum CtlHub {
    static let usage = """
        usage: nhctl hub list
               nhctl hub create NAME
               nhctl hub delete NAME [--yes]
               nhctl hub keys NAME
               nhctl hub policy NAME POLICY Listen|Send|Manage[,…]
               nhctl hub regenerate NAME POLICY primary|secondary
               nhctl hub limits NAME [--requests N] [--sends N] [--installations N]   (a second; 0 lifts one)
        """

    static func run(_ parsed: Arguments, config: HubConfig, environment: [String: String], confirm: (String) -> String? = readAnswer) -> Int32 {
        let words = Array(parsed.positionals.dropFirst())
        guard let command = words.first else { return Ctl.fail(usage) }
        let json = parsed.has("json")
        do {
            let caller = try CtlCaller(parsed, config: config, environment: environment)
            let registry = try caller.client(config.registry.requests, namespace: true)
            defer { registry.close() }
            switch (command, words.count) {
            case ("list", 1):
                for hub in try registry.call(HubListRequest()).hubs {
                    if json {
                        print(String(decoding: try HubCodec.encodeValue(hub), as: UTF8.self))
                    } else {
                        print("\(hub.name)\(hub.isDefault ? " (default)" : "")  \(hub.installations) installation\(hub.installations == 1 ? "" : "s")")
                    }
                }
            case ("create", 2):
                let hub = try registry.call(HubCreate(name: words[1]))
                settle(caller, registry, config: config)
                print(json ? String(decoding: try HubCodec.encodeValue(summary(hub)), as: UTF8.self) : "created hub \(hub.name)")
                if !json { printKeys(hub, config: config) }
            case ("delete", 2):
                if !parsed.has("yes") {
                    guard let answer = confirm("Delete hub '\(words[1])' with all its installations, users and notifications? Type its name to confirm: ")
                    else { return Ctl.fail("nhctl hub delete deletes everything the hub holds: pass --yes to confirm without a terminal") }
                    guard answer.trimmingCharacters(in: .whitespacesAndNewlines) == words[1] else { return Ctl.fail("not confirmed; nothing deleted") }
                }
                _ = try registry.call(HubDelete(name: words[1]))
                print(json ? #"{"deleted":"\#(words[1])"}"# : "deleted hub \(words[1])")
            case ("keys", 2):
                let hub = try registry.call(HubGet(name: words[1]))
                if json {
                    for policy in hub.policies { print(String(decoding: try HubCodec.encodeValue(connectionStrings(policy, hub: hub.name, config: config)), as: UTF8.self)) }
                } else {
                    printKeys(hub, config: config)
                }
            case ("policy", 4):
                let rights = words[3].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                let policy = try registry.call(HubPolicyPut(hub: words[1], name: words[2], rights: rights))
                settle(caller, registry, config: config)
                print(json
                    ? String(decoding: try HubCodec.encodeValue(connectionStrings(policy, hub: words[1], config: config)), as: UTF8.self)
                    : "policy \(policy.name) (\(policy.rights.joined(separator: ","))) of hub \(words[1]):\n  \(connectionStrings(policy, hub: words[1], config: config).primaryConnectionString)")
            case ("regenerate", 4):
                let policy = try registry.call(HubKeysRegenerate(hub: words[1], name: words[2], policyKey: words[3].lowercased() == "secondary" ? "SecondaryKey" : words[3].lowercased() == "primary" ? "PrimaryKey" : words[3]))
                settle(caller, registry, config: config)
                let strings = connectionStrings(policy, hub: words[1], config: config)
                print(json ? String(decoding: try HubCodec.encodeValue(strings), as: UTF8.self)
                    : "regenerated the \(words[3].lowercased()) key of \(policy.name) of hub \(words[1]):\n  primary:   \(strings.primaryConnectionString)\n  secondary: \(strings.secondaryConnectionString)")
            case ("limits", 2):
                func number(_ option: String) throws -> Int? {
                    guard let text = parsed[option: option] else { return nil }
                    guard let value = Int(text), value >= 0 else { throw HubError(.invalidArgument, "--\(option) takes 0 (no limit) or more, not '\(text)'") }
                    return value
                }
                let hub = try registry.call(HubLimitsPut(
                    hub: words[1], limits: HubLimits(
                        requestsPerSecond: try number("requests"), sendsPerSecond: try number("sends"), installations: try number("installations"))))
                settle(caller, registry, config: config)
                let limits = hub.limits ?? HubLimits()
                print(json ? String(decoding: try HubCodec.encodeValue(limits), as: UTF8.self)
                    : "hub \(hub.name): requests \(limits.requestsPerSecond.map(String.init) ?? "as configured")/s, sends \(limits.sendsPerSecond.map(String.init) ?? "as configured")/s, installations \(limits.installations.map(String.init) ?? "as configured") (0: none)")
            default:
                return Ctl.fail(usage)
            }
            return 0
        } catch {
            return CtlSend.report(error)
        }
    }

    /// A policy's connection strings, as Azure's listKeys gives them.
    struct PolicyKeys: Encodable {
        var keyName: String
        var rights: [String]
        var primaryKey: String
        var secondaryKey: String
        var primaryConnectionString: String
        var secondaryConnectionString: String
    }

    static func connectionStrings(_ policy: HubPolicy, hub: String, config: HubConfig) -> PolicyKeys {
        let strings = policy.connectionStrings(endpoint: config.namespace, hub: hub)
        return PolicyKeys(
            keyName: policy.name, rights: policy.rights, primaryKey: policy.key, secondaryKey: policy.secondaryKey ?? policy.key,
            primaryConnectionString: strings.primary, secondaryConnectionString: strings.secondary)
    }

    static func summary(_ hub: HubDescription) -> HubSummary {
        HubSummary(name: hub.name, createdAt: hub.createdAt, isDefault: false, installations: 0)
    }

    /// Waits (at most 3 s) until the other services have read the change to the hub catalog, so
    /// that the next command, whichever service it reaches, finds the hub or key just made.
    static func settle(_ caller: CtlCaller, _ registry: HubClient, config: HubConfig) {
        guard let version = HubCatalogSettling.version(of: registry) else { return }
        let endpoints = [
            ("nh-publish", config.publish.requests), ("nh-sync", config.sync.requests), ("nh-dispatch", config.dispatch.requests),
            ("nh-gateway", config.gateway.requests),
        ]
        // A service that is not running answers nothing: each look waits a moment, not a request's timeout.
        let clients = endpoints.compactMap { name, endpoint in
            (try? HubClient(connect: endpoint, policy: RetryPolicy(timeout: 300, attempts: 1), curve: caller.bus.client)).map { (name, $0) }
        }
        defer { clients.forEach { $0.1.close() } }
        HubCatalogSettling.wait(for: version, services: clients.map { ($0.0, $0.1 as any ServiceCalling) })
    }

    static func printKeys(_ hub: HubDescription, config: HubConfig) {
        for policy in hub.policies {
            let strings = connectionStrings(policy, hub: hub.name, config: config)
            print("\(policy.name) (\(policy.rights.joined(separator: ","))):\n  \(strings.primaryConnectionString)\n  \(strings.secondaryConnectionString)")
        }
    }

    /// A line typed at the terminal; nil when standard input is not one.
    static func readAnswer(_ prompt: String) -> String? {
        guard isatty(0) == 1 else { return nil }
        FileHandle.standardError.write(Data(prompt.utf8))
        return readLine()
    }
}
