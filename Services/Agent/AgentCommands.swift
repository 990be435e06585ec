import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import Tags

/// The agent's one-shot commands: they change or show its local settings, and tell a running
/// agent about a change so it registers again at once.
enum AgentCommands {
    static func run(_ command: String, _ arguments: [String], environment: [String: String], usage: String) -> Int32 {
        let parsed: Arguments
        let config: HubConfig
        do {
            parsed = try Arguments(arguments, valued: ["config", "revoke", "plaintext"], flags: [])
            config = try ConfigLoader.load(
                file: ConfigLoader.file(option: parsed[option: "config"], environment: environment, installedName: "agent.json"), environment: environment)
        } catch {
            return fail("\(error)")
        }
        if parsed.has("help") || command == "help" {
            print(usage)
            return 0
        }
        let identity = AgentIdentity(config: config, environment: environment)
        do {
            let store = try AgentStore.open(home: identity.home)
            switch command {
            case "subscribe", "unsubscribe":
                guard !parsed.positionals.isEmpty else { return fail("\(command) needs at least one category") }
                for category in parsed.positionals {
                    do {
                        try Tag.validate(category)
                    } catch {
                        return fail("category '\(category)': \(error.message)")
                    }
                }
                var categories: [String]
                do {
                    categories = try store.categories
                } catch {
                    // A value that cannot be read is replaced by what this command makes.
                    FileHandle.standardError.write(Data("nh-agent: \(error); starting from no categories\n".utf8))
                    categories = []
                }
                if command == "subscribe" {
                    categories += parsed.positionals.filter { !categories.contains($0) }
                } else {
                    categories.removeAll { parsed.positionals.contains($0) }
                }
                guard categories.count <= config.limits.tagsPerInstallation else {
                    return fail("an installation has at most \(config.limits.tagsPerInstallation) categories; this would make \(categories.count). The categories in force stay.")
                }
                let list = categories.isEmpty ? "(none)" : categories.joined(separator: " ")
                // A running agent registers first and keeps the list only if the registry took it.
                switch notifyRunningAgent(config.agentControl(home: identity.home), categories, curve: localCurve(identity, store)) {
                case .registered:
                    print("categories: \(list) — the running agent registered again")
                case .refused(let error) where error.code == .unavailable:
                    print("categories: \(list) — \(error.message)")
                case .refused(let error):
                    return fail("the registry refused: \(error.code.rawValue): \(error.message). The categories in force stay.")
                case .notRunning:
                    try store.setCategories(categories)
                    print("categories: \(list) — takes effect when the agent starts")
                }
                return 0
            case "categories":
                let categories = try store.categories
                print(categories.isEmpty ? "(none)" : categories.joined(separator: "\n"))
                return 0
            case "health":
                // A socket that cannot even be made means no agent to ask.
                guard let client = try? HubClient(
                    connect: config.agentControl(home: identity.home), policy: RetryPolicy(timeout: 3_000, attempts: 1), curve: localCurve(identity, store))
                else { return fail("no agent runs with home \(identity.home.path); start one with nh-agent") }
                defer { client.close() }
                let reply: HealthReply
                do {
                    reply = try client.call(HealthRequest())
                } catch {
                    print("agent: not running (\((error as? HubError)?.message ?? "\(error)"))")
                    return 1
                }
                print("agent: \(reply.status), pid \(reply.pid), up \(Int(reply.uptimeSeconds)) s")
                for (name, value) in (reply.details ?? [:]).sorted(by: { $0.key < $1.key }) { print("\(name): \(value)") }
                return reply.status == "ok" ? 0 : 1
            case "apps":
                return apps(parsed.positionals, config: config, identity: identity, store: store)
            case "id":
                print(try environment["NH_AGENT_INSTALLATION_ID"] ?? store.installationId())
                return 0
            case "login":
                guard parsed.positionals.count == 1 else { return fail("usage: nh-agent login CREDENTIAL") }
                try store.set("userCredential", parsed.positionals[0])
                print("signed in; the agent uses this credential from its next start")
                return 0
            case "keys", "pair":
                guard let sync = try userSync(store, config, environment, identity) else { return fail("not signed in as a user; run nh-agent login CREDENTIAL") }
                return try keyCommand(command, parsed, AgentKeyCommands(keys: AgentKeys(store: store, device: sync.device), sync: sync))
            case "list":
                let cache = UserCache(database: store.database)
                // The local copy needs no hub; the user's sync, when it can be made, opens what is encrypted.
                let sync = (try? userSync(store, config, environment, identity)) ?? nil
                for notification in try cache.all() { print(describe(sync?.readable(notification) ?? notification)) }
                return 0
            case "history":
                guard let sync = try userSync(store, config, environment, identity) else { return fail("not signed in as a user; run nh-agent login CREDENTIAL") }
                for notification in try sync.history().notifications { print(describe(sync.readable(notification))) }
                return 0
            case let name where AgentUserAction.Action(rawValue: name) != nil:
                guard parsed.positionals.count == 1 else { return fail("usage: nh-agent \(name) NOTIFICATION_ID") }
                let action = AgentUserAction.Action(rawValue: name)!
                let id = parsed.positionals[0]
                // A running agent does it, so its own output shows the change at once.
                // Without a socket to a running agent, the change is made here.
                if let client = try? HubClient(
                    connect: config.agentControl(home: identity.home), policy: RetryPolicy(timeout: 3_000, attempts: 1),
                    curve: localCurve(identity, store))
                {
                    defer { client.close() }
                    do {
                        _ = try client.call(AgentUserAction(id: id, action: action))
                        print("\(name): \(id)")
                        return 0
                    } catch let error as HubError where error.code != .timeout {
                        return fail("\(error.code.rawValue): \(error.message)")
                    } catch {}
                }
                guard let sync = try userSync(store, config, environment, identity) else { return fail("not signed in as a user; run nh-agent login CREDENTIAL") }
                try sync.act(id, action)
                print("\(name): \(id)")
                return 0
            default:
                return fail("unknown command '\(command)'\n\n\(usage)")
            }
        } catch {
            FileHandle.standardError.write(Data("nh-agent: \(error)\n".utf8))
            return 1
        }
    }

    /// `keys [init [--plaintext refuse] | rotate [--revoke DEVICE,…] [--plaintext refuse|accept] | recover [KEY]]`,
    /// `pair`, `pair accept CODE`.
    static func keyCommand(_ command: String, _ parsed: Arguments, _ keys: AgentKeyCommands) throws -> Int32 {
        let words = parsed.positionals
        do {
            switch (command, words.first) {
            case ("keys", nil): return try keys.show()
            case ("keys", "init"): return try keys.initialize(refusePlaintext: try plaintext(parsed) ?? false)
            case ("keys", "rotate"):
                let revoke = (parsed[option: "revoke"] ?? "").split(separator: ",").map(String.init)
                return try keys.rotate(revoke: revoke, refusePlaintext: try plaintext(parsed))
            case ("keys", "recover"): return try keys.recover(words.count > 1 ? words[1...].joined() : nil)
            case ("pair", nil): return try keys.pairNew()
            case ("pair", "accept"):
                guard words.count == 2 else { return fail("usage: nh-agent pair accept CODE") }
                return try keys.pairAccept(words[1])
            default:
                return fail("usage: nh-agent keys [init [--plaintext refuse] | rotate [--revoke DEVICE[,DEVICE…]] [--plaintext refuse|accept] | recover [KEY]], nh-agent pair [accept CODE]")
            }
        } catch let error as HubError {
            return fail("\(error.code.rawValue): \(error.message)")
        } catch let error as PushCryptoError {
            return fail(error.message)
        } catch let error as AgentKeyError {
            return fail(error.description)
        }
    }

    /// `--plaintext refuse|accept`: whether the hub refuses the user's posts that are not encrypted.
    static func plaintext(_ parsed: Arguments) throws -> Bool? {
        guard let value = parsed[option: "plaintext"] else { return nil }
        guard ["refuse", "accept"].contains(value) else { throw AgentKeyError("--plaintext takes refuse or accept, not '\(value)'") }
        return value == "refuse"
    }

    /// `nh-agent apps` lists the apps registered for push; `nh-agent apps remove APP` unregisters
    /// one through the running agent, which tells the hub and the app. Without a running agent the
    /// list comes from the store.
    static func apps(_ positionals: [String], config: HubConfig, identity: AgentIdentity, store: AgentStore) -> Int32 {
        // No socket means no running agent: the list comes from the store.
        let client = try? HubClient(
            connect: config.agentControl(home: identity.home), policy: RetryPolicy(timeout: 5_000, attempts: 1), curve: localCurve(identity, store))
        defer { client?.close() }
        if positionals.isEmpty {
            var apps: [AgentApp]
            do {
                guard let client else { throw HubError(.unavailable, "no agent") }
                apps = try client.call(AgentAppsRequest()).apps
            } catch {
                do {
                    let base = AgentDaemon.endpointBase(namespace: config.namespace)
                    let appStore = AppStore(database: store.database)
                    apps = try appStore.apps().map {
                        AgentApp(service: $0.service, description: $0.description, endpoint: base + $0.secret, connector: String($0.connector),
                                 waiting: try appStore.waiting(endpointId: $0.endpointId), vapid: $0.vapid != nil)
                    }
                } catch {
                    return fail("cannot read the registered apps from \(store.database.path): \(error)")
                }
            }
            if apps.isEmpty { print("(no apps registered)") }
            for app in apps {
                var line = "\(app.service)  \(app.endpoint)"
                if let description = app.description { line += "  \"\(description)\"" }
                line += "  connector \(app.connector)\(app.vapid ? ", VAPID" : "")\(app.waiting > 0 ? ", \(app.waiting) waiting" : "")"
                print(line)
            }
            return 0
        }
        guard positionals.first == "remove" else { return fail("usage: nh-agent apps [remove APP]") }
        guard positionals.count == 2 else { return fail("usage: nh-agent apps remove APP (its service name, or an endpoint)") }
        guard let client else { return fail("no agent runs with home \(identity.home.path); start it to unregister an app") }
        do {
            _ = try client.call(AgentAppRemove(app: positionals[1]))
        } catch let error as HubError where error.code == .timeout {
            return fail("no agent answered at \(config.agentControl(home: identity.home)); start it to unregister an app")
        } catch let error as HubError {
            return fail("\(error.code.rawValue): \(error.message)")
        } catch {
            return fail("\(error)")
        }
        print("unregistered: \(positionals[1]); its endpoints answer 410")
        return 0
    }

    /// The curve settings for the running agent's control socket on this host: the listen key's
    /// bus keys, and the agent's device key as the server's; nil when either is missing.
    static func localCurve(_ identity: AgentIdentity, _ store: AgentStore) -> (keys: CurveKeyPair, serverPublicKey: String)? {
        // Absent keys mean a plain socket: the commands then reach only an agent without keys either.
        guard let listen = identity.credential, let keys = try? BusSecurity.clientKeys(for: listen),
            let device = try? store.existingChannelKeys()
        else { return nil }
        return (keys, device.publicKey)
    }

    static func userSync(_ store: AgentStore, _ config: HubConfig, _ environment: [String: String], _ identity: AgentIdentity) throws
        -> AgentUserSync?
    {
        guard let credential = try environment["NH_AGENT_USER_CREDENTIAL"] ?? store.setting("userCredential") else { return nil }
        let logger = Logger(service: "nh-agent", level: .warning)
        let listen = try identity.waitForCredential(seconds: 0)
        let client = try HubClient(
            connect: config.sync.requests, policy: RetryPolicy(timeout: 3_000, attempts: 1),
            curve: (try BusSecurity.clientKeys(for: listen), try BusKeys.serverPublicKey(config: config, environment: environment)))
        client.hub = { [identity] in identity.envelopeHub }
        let output = AgentOutput(hook: nil, logger: logger)
        output.lines = false
        let device = try environment["NH_AGENT_INSTALLATION_ID"] ?? store.installationId()
        let sync = AgentUserSync(
            cache: UserCache(database: store.database), credential: credential, device: device, logger: logger, output: output, client: client)
        sync.keys = AgentKeys(store: store, device: device)
        return sync
    }

    static func describe(_ notification: UserNotification) -> String {
        let title = notification.visual.map { "\($0.title): \($0.body)" } ?? notification.raw ?? ""
        return "\(notification.id)  \(notification.readState.rawValue.padding(toLength: 6, withPad: " ", startingAt: 0))  "
            + "\(notification.userActionState.rawValue.padding(toLength: 13, withPad: " ", startingAt: 0))  \(title)"
    }

    enum Notified {
        case registered
        case refused(HubError)
        case notRunning
    }

    static func notifyRunningAgent(
        _ control: String, _ categories: [String], curve: (keys: CurveKeyPair, serverPublicKey: String)?
    ) -> Notified {
        // No socket means no running agent to tell.
        guard let client = try? HubClient(connect: control, policy: RetryPolicy(timeout: 3_000, attempts: 1), curve: curve) else {
            return .notRunning
        }
        defer { client.close() }
        do {
            _ = try client.call(AgentCategoriesChanged(categories: categories))
            return .registered
        } catch let error as HubError where error.code != .timeout {
            return .refused(error)
        } catch {
            return .notRunning
        }
    }

    static func fail(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("nh-agent: \(message)\n".utf8))
        return 2
    }
}
