import Bus
import Foundation
import HubProtocol
import ServiceKit

/// nhctl: the operator's command line. Exit codes: 0 success, 1 a service said no or did not
/// answer, 2 bad arguments or config.
enum Ctl {
    static let usage = """
        nhctl: operate a notification hub

        Usage: nhctl [--config FILE] [--connection-string TEXT] [--hub NAME] [--json] [--timeout MS] COMMAND
               nhctl --help | -h | --version

        Commands:
          health [--agent]            ask every service whether it is up, one line each; a local agent that
                                      does not run is reported, and counted as down only with --agent
          send [TARGET] NAME=VALUE... send a template notification with these properties
          send [TARGET] --native JSON [--platform P] [--headers 'NAME=VALUE;…']
                                      send a native notification, to linux agents or to platform P's
                                      installations (apns, fcmv1, gcm, wns, adm, baidu, browser) with its headers
          send ... --test             wait for the dispatcher and print what became of each of the first 10 targets
          send [TARGET] --rich FILE --message TEXT [--rich-type image] [--content-type image/png]
                                      store FILE and send a silent notification; agents fetch it, then show it
               TARGET: --tag EXPRESSION | --installation ID | --user USER (none: everyone)
               --ttl SECONDS, --idempotency-key KEY
               --encrypted-for KEYID: FILE is one RFC 8291 record for that key of --user's, opened by their devices
          send ... --schedule TIME    send at TIME (ISO 8601, at most 7 days ahead); --direct HANDLE sends to one device
          cancel ID                   cancel a scheduled send that has not fired
          outcome ID                  what became of a notification
          installations list [--tag T] [--channel HANDLE] [--top N] | show ID | delete ID
                                      show ID adds "placement": its shard, the dispatcher holding it,
                                      and whether its agent is connected to the dispatcher asked
          user credential USER [--lifetime SECONDS]
                                      enroll a device of USER: prints the credential for nh-agent login,
                                      valid for SECONDS (60 s to 5 years; default: 365 days)
          user post USER --app-id ID (--title T --body B | --raw R) [--expires-in S] [--priority P] [--group G]
                                      post a notification to every device of USER
          user list USER              USER's notifications in the store, with their states
          keys                        the default hub's and the namespace's connection strings
          hub list | create NAME | delete NAME [--yes] | keys NAME
                                      the namespace's hubs: made with their two default policies; deleted with
                                      everything they hold (asked to confirm, or --yes); keys prints both keys'
                                      connection strings, with EntityPath (needs a namespace key)
          hub policy NAME POLICY RIGHTS   add or change a hub's policy (RIGHTS: Listen,Send,Manage)
          hub regenerate NAME POLICY primary|secondary
                                      a new key for one of a policy's two keys; the other keeps working
          hub limits NAME [--requests N] [--sends N] [--installations N]
                                      the hub's own limits (requests and sends a second, installations held;
                                      0 lifts one), beside limits.…PerHub in the config
          job import FILE [--mode create|upsert|delete] [--output DIR] [--no-wait]
                                      apply FILE's installations (JSON, or registration descriptions as XML,
                                      a line each; a path on the registration service's host), with a
                                      progress bar; the lines it could not apply go to DIR/ID/Failed.txt
                                      (DIR: FILE's directory); exit 1 when any line failed
          job export DIR [--no-wait]  write the hub's installations to DIR/ID/Output.txt, a JSON line each
          job list | show ID [--wait] the hub's jobs, or one (--wait: until it finishes)
          config [--defaults]         every setting with its value as this host loads it (or the defaults), as JSON
          pns show                    the push services the dispatcher delivers to (never their secrets)
          pns set apple --key-file F.p8 --key-id K --team-id T --bundle-id B [--endpoint production|sandbox|URL]
          pns set fcm --service-account F.json [--endpoint URL]
          pns set browser --subject mailto:ADDRESS
          pns set wns (--package-sid SID | --tenant-id T --client-id C) --secret-file F [--token-endpoint URL]
          pns set adm --client-id ID --secret-file F [--endpoint URL] [--token-endpoint URL]
          pns set baidu --api-key KEY --secret-file F [--endpoint URL]
                                      check and keep a push service's credentials (Manage key); the key or
                                      secret file's text is sent, kept by the dispatcher in a 0600 file
          pns remove apple|fcm|browser|wns|adm|baidu

        Commands act on the hub --hub names, else the connection string's EntityPath, else the default
        hub (the config's `hub`). They sign with --connection-string, NH_CONNECTION_STRING, or the
        data folder's namespace key (namespace-keys.json, which reaches every hub), else keys.json's full key. --json prints each result as a JSON line; --timeout is how long health
        waits for each service (default: 1000 ms).

        Settings come from the defaults, the JSON config file (--config or NH_CONFIG; installed,
        /etc/nh/hub.json without either) and NH_* environment variables, as for the services.
        nhctl --version prints the release and the commit it was built from.
        Exit codes: 0 all good, 1 a service is down or refused, 2 bad arguments or config.
        """

    /// The options that take a value, for every command; each is named in `usage`.
    static let valuedOptions: Set<String> = [
        "config", "timeout", "tag", "installation", "user", "ttl", "native", "connection-string", "idempotency-key",
        "app-id", "title", "body", "raw", "expires-in", "priority", "group", "lifetime", "rich", "message", "rich-type",
        "content-type", "schedule", "direct", "top", "platform", "headers", "channel", "key-file", "key-id", "team-id",
        "bundle-id", "endpoint", "service-account", "subject", "package-sid", "tenant-id", "client-id", "secret-file", "token-endpoint",
        "api-key", "hub", "requests", "sends", "installations", "encrypted-for", "mode", "output",
    ]
    /// The options that take none; each is named in `usage`, as is --help.
    static let flagOptions: Set<String> = ["json", "agent", "test", "defaults", "version", "yes", "no-wait", "wait"]

    static func main(_ arguments: [String], environment: [String: String]) -> Int32 {
        let parsed: Arguments
        do {
            parsed = try Arguments(arguments, valued: valuedOptions, flags: flagOptions)
        } catch {
            return fail("\(error)\n\n\(usage)")
        }
        if parsed.has("version") {
            print("nhctl \(HubVersion.description)")
            return 0
        }
        if parsed.has("help") || parsed.positionals.isEmpty {
            print(usage)
            return parsed.has("help") ? 0 : 2
        }
        let config: HubConfig
        do {
            config = try ConfigLoader.load(file: ConfigLoader.file(option: parsed[option: "config"], environment: environment), environment: environment)
        } catch {
            return fail("config error: \(error)")
        }
        let timeout = parsed[option: "timeout"].flatMap(Int.init) ?? 1_000
        if parsed.positionals[0] == "config" {
            do {
                print(try ConfigLoader.describe(parsed.has("defaults") ? HubConfig() : config))
                return 0
            } catch {
                return fail("config error: \(error)")
            }
        }
        // Every bus socket is CURVE: nhctl connects with the keys of the credential it holds. A
        // credential or bus key that cannot be had stops any command but `keys` here, before it starts.
        var bus: BusSecurity?
        if parsed.positionals[0] != "keys" {
            do {
                bus = try CtlCaller(parsed, config: config, environment: environment).bus
            } catch {
                return fail("\((error as? HubError)?.message ?? "\(error)")")
            }
        }
        switch parsed.positionals[0] {
        case "health":
            return health(
                config, bus: bus, timeout: timeout, json: parsed.has("json"), requireAgent: parsed.has("agent"), environment: environment)
        case "send":
            return CtlSend.send(parsed, config: config, environment: environment)
        case "outcome":
            return CtlSend.outcome(parsed, config: config, environment: environment)
        case "cancel":
            return CtlSend.cancel(parsed, config: config, environment: environment)
        case "installations":
            return CtlInstallations.run(parsed, config: config, environment: environment)
        case "user":
            return CtlUser.run(parsed, config: config, environment: environment)
        case "pns":
            return CtlPush.run(parsed, config: config, environment: environment)
        case "keys":
            return CtlSend.keys(config: config, json: parsed.has("json"))
        case "hub":
            return CtlHub.run(parsed, config: config, environment: environment)
        case "job":
            return CtlJobs.run(parsed, config: config, environment: environment)
        case let command:
            return fail("unknown command '\(command)'\n\n\(usage)")
        }
    }

    struct HealthLine: Encodable {
        var service: String
        var endpoint: String
        var status: String
        var pid: Int32?
        var uptimeSeconds: Double?
        var error: String?
        /// The service's own figures (with --json), such as a dispatcher's agents and shards.
        var details: [String: String]?
    }

    /// The status of the local agent's line when no agent runs on this host, or none ever ran.
    static let absentAgent = "none"

    /// 0 when every service is up. An absent local agent is reported but fails the check only
    /// when `requireAgent` asks for one (`nhctl health --agent`); an agent that answers badly
    /// always fails it.
    static func healthExitCode(_ lines: [HealthLine], requireAgent: Bool) -> Int32 {
        lines.allSatisfy { $0.status == "ok" || ($0.service == "nh-agent" && $0.status == absentAgent && !requireAgent) } ? 0 : 1
    }

    /// The lines as a table whose columns are as wide as their widest value: an endpoint is never
    /// cut (an agent's `ipc://` path runs long), and the columns still line up.
    static func healthTable(_ lines: [HealthLine]) -> [String] {
        let rows = lines.map { line in
            [line.service, line.status, line.endpoint,
             line.pid.map { "pid \($0), up \(String(format: "%.1f", line.uptimeSeconds ?? 0))s" } ?? (line.error ?? "")]
        }
        let widths = (0..<3).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            (0..<3).map { row[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: " ") + " " + row[3]
        }
    }

    static func health(
        _ config: HubConfig, bus: BusSecurity?, timeout: Int, json: Bool, requireAgent: Bool, environment: [String: String]
    ) -> Int32 {
        var lines: [HealthLine] = []
        var store: [String: String]?
        for (service, endpoints) in config.serviceEndpoints {
            var line = HealthLine(service: service, endpoint: endpoints.requests, status: "down")
            // The agent's control socket is served with its device key, kept in its home.
            let home = environment["NH_AGENT_HOME"].map { URL(fileURLWithPath: $0, isDirectory: true) }
                ?? URL(fileURLWithPath: config.dataDir, isDirectory: true).appendingPathComponent("agent", isDirectory: true)
            let counted = requireAgent ? "" : " (not counted; nhctl health --agent counts it)"
            do {
                var curve = bus?.client
                if service == "nh-agent" {
                    guard let device = BusKeys.deviceKey(agentHome: home), let keys = curve?.keys else {
                        throw HubError(.unavailable, "no local agent has run with home \(home.path); start one with nh-agent\(counted)")
                    }
                    curve = (keys, device)
                }
                let endpoint = service == "nh-agent" ? config.agentControl(home: home) : endpoints.requests
                line.endpoint = endpoint
                let client = try HubClient(connect: endpoint, policy: RetryPolicy(timeout: timeout, attempts: 1), curve: curve)
                defer { client.close() }
                let reply = try client.call(HealthRequest())
                line.status = reply.service == service ? reply.status : "wrong service: \(reply.service)"
                line.pid = reply.pid
                line.uptimeSeconds = reply.uptimeSeconds
                line.details = json ? reply.details : nil
                // The publish service's word first: its commits are the accepted sends.
                if store == nil || service == "nh-publish", let details = reply.details, details["storeRole"] != nil { store = details }
            } catch let error as HubError where service == "nh-agent" && [.unavailable, .timeout].contains(error.code) {
                line.status = absentAgent
                line.error = error.code == .unavailable
                    ? error.message
                    : "no local agent answers (home \(home.path)); start one with nh-agent\(counted)"
            } catch {
                line.error = "\(error)"
            }
            lines.append(line)
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            for line in lines {
                // Lines of strings always encode.
                print(String(decoding: (try? encoder.encode(line)) ?? Data(), as: UTF8.self))
            }
        } else {
            for row in healthTable(lines) { print(row) }
            if let store { print(storeLine(store)) }
        }
        return healthExitCode(lines, requireAgent: requireAgent)
    }

    /// The store's line of `nhctl health`, from a service's details: its role, history and
    /// replication, and what a failover would lose now, if anything.
    static func storeLine(_ details: [String: String]) -> String {
        var text = "store".padding(toLength: 12, withPad: " ", startingAt: 0) + " " + (details["storeRole"] ?? "unknown")
        if let timeline = details["storeTimeline"] { text += ", timeline \(timeline)" }
        if let history = details["storeHistory"] { text += ", history \(history)" }
        if let resets = details["storeHistoryResetsTotal"], resets != "0" { text += ", history rewound \(resets) times since the service started" }
        if let error = details["storeError"] { text += ": \(error)" }
        if let synchronous = details["storeSynchronous"] { text += "\n  synchronous standbys: \(synchronous)" }
        if let standbys = details["storeStandbys"] { text += "\n  standbys: \(standbys)" }
        if let risk = details["storeRisk"] { text += "\n  risk: \(risk)" }
        return text
    }

    static func fail(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("nhctl: \(message)\n".utf8))
        return 2
    }
}
