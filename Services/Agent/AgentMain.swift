import Foundation
import HubProtocol
import ServiceKit
#if canImport(Glibc)
import Glibc
#endif

/// `nh-agent`'s entry point, called by its executable and by `nh-services` (Services/Executables).
public enum AgentMain {
    public static func main(_ arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> Never {
        var arguments = arguments
        /// The whole usage: `nh-agent help`, `nh-agent --help` and `nh-agent run --help` all print it.
        let usage = """
            nh-agent: the client agent on a Linux host

            Usage:
              nh-agent [run] [--config FILE] [--check-config] [--version]
                                                   receive notifications (the daemon)
              nh-agent subscribe CATEGORY...       choose the categories to receive, such as World Sports
              nh-agent unsubscribe CATEGORY...     stop receiving categories
              nh-agent categories                  show the chosen categories
              nh-agent id                          show this agent's installation id
              nh-agent login CREDENTIAL            sign in as a user, with a credential from nhctl user credential
              nh-agent list                        this user's notifications as this agent has them, with states
              nh-agent history                     the user's notifications in the store, dismissed ones included
              nh-agent read|dismiss|activate|snooze|delete ID
                                                   change a notification for the user on every device
              nh-agent health                      whether the running agent is up, registered, and reaches
                                                   the desktop's notification server (which one, and what it can do)
              nh-agent apps                        the apps registered for push (UnifiedPush), with their endpoints
              nh-agent apps remove APP             unregister an app (its service name, or an endpoint): its
                                                   endpoints answer 410 from then on
              nh-agent help | --help | -h          this text

            Each notification is written to standard output as one JSON line, passed to the command in
            NH_AGENT_HOOK (on standard input and as NH_* variables), and shown as a popup through the
            desktop's notification server (org.freedesktop.Notifications) on the session bus. Closing a
            user's notification's popup dismisses it on every device; clicking it (or Open) activates it;
            Snooze snoozes it.

            The agent is also a UnifiedPush distributor on the session bus (org.unifiedpush.Distributor.nh):
            an app registers there and is given an endpoint URL at the hub's gateway; what its server posts
            to that URL is handed to the app's connector, acknowledged once the app has it, and kept for an
            app that is not running until it registers again or the message's TTL ends.

            Environment:
              NH_AGENT_HOME               the agent's folder: its store, device key and rich-payload cache
                                          (default: DATA_DIR/agent)
              NH_AGENT_CONNECTION_STRING  the listen key's connection string (default: the listen key in
                                          the data folder's keys.json, on a host that runs the services)
              NH_BUS_SERVER_KEY           the hub's CURVE public key, from nhctl keys (default: read from
                                          the data folder)
              NH_AGENT_USER_CREDENTIAL    a user credential, instead of nh-agent login
              NH_AGENT_TEMPLATE           the template registered (default:
                                          {"title":"$(title)","message":"$(messageParam)"})
              NH_AGENT_HOOK               a command run for each notification
              NH_AGENT_INSTALLATION_ID    the installation id (default: one made at the first start and kept)
              NH_AGENT_RICH_ATTEMPTS      tries to fetch a rich payload before it is reported failed (default: 8)
              NH_AGENT_DESKTOP            0: no popups
              NH_AGENT_UNIFIEDPUSH        0: no UnifiedPush distributor (with NH_AGENT_DESKTOP=0 too, the
                                          session bus is never contacted)
              NH_AGENT_UNIFIEDPUSH_NAME   the distributor's bus name (default: org.unifiedpush.Distributor.nh)
              NH_AGENT_POWER_SUPPLY       where the power supplies are read, for the urgency push messages
                                          need (default: /sys/class/power_supply)
              DBUS_SESSION_BUS_ADDRESS    the desktop session's bus (default: $XDG_RUNTIME_DIR/bus when it
                                          exists); with neither, there are no popups. A bus is never started.

            Settings come from their defaults, then the JSON config file (--config or NH_CONFIG; installed,
            /etc/nh/agent.json without either), then NH_* environment variables, as for every service:
            NH_DATA_DIR, NH_AGENT_REQUESTS (the local control socket: by default ipc://AGENT_HOME/control.sock,
            a Unix socket in the agent's home that only its user can reach; a tcp:// endpoint lets any
            local user who holds the listen key in), NH_REGISTRY_REQUESTS, NH_DISPATCH_AGENTS,
            NH_SYNC_REQUESTS and the rest.
            Exit codes: 0 success (the daemon: after SIGINT or SIGTERM), 1 a runtime failure, 2 bad
            arguments or config, or a command that was refused.
            """

        let environment = ProcessInfo.processInfo.environment
        let command = arguments.first.flatMap { $0.hasPrefix("-") ? nil : $0 } ?? "run"
        if arguments.first == command { arguments.removeFirst() }

        if command == "run" {
            ServiceMain.run(
                name: "nh-agent", summary: "the client agent: receives notifications on a Linux host", usage: usage, arguments: arguments, configName: "agent.json",
                dataFolder: { AgentIdentity(config: $0, environment: environment).home }
            ) { context in
                let identity = AgentIdentity(config: context.config, environment: environment)
                let store = AgentStore(database: try context.openStore("agent.db", migrations: AgentSchema.migrations))
                let daemon = try AgentDaemon(context: context, store: store, identity: identity, environment: environment)
                var endpoints: [String: String] = [:]
                // The control socket: by default a Unix socket in the agent's home, which only this
                // user can open (0700), reach (0600) and connect to (the peer's uid is checked).
                guard chmod(identity.home.path, 0o700) == 0 else {
                    throw ConfigError("cannot make the agent's home \(identity.home.path) private (0700): \(String(cString: strerror(errno)))")
                }
                let control = try context.bindRequests(
                    context.config.agentControl(home: identity.home), ownerOnly: true, endpoints: { endpoints }) {
                    ["installationId": daemon.installationId, "registered": String(daemon.registered)]
                        .merging(daemon.desktop.health) { $1 }.merging(daemon.distributor.health) { $1 }.merging(daemon.placement) { $1 }
                }
                endpoints["requests"] = control.endpoint
                AgentControl(
                    store: store, tagLimit: context.config.limits.tagsPerInstallation, act: daemon.userSync.map { sync in { try sync.act($0, $1) } },
                    register: { try daemon.register(categories: $0) }, registerLater: { daemon.register() }, apps: { try daemon.distributor.apps() },
                    removeApp: { try daemon.distributor.remove($0) }
                ).install(on: control)
                try daemon.start()
            }
        }

        exit(AgentCommands.run(command, arguments, environment: environment, usage: usage))
    }
}
