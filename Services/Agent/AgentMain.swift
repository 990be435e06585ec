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

        let environment = ProcessInfo.processInfo.environment
        let command = arguments.first.flatMap { $0.hasPrefix("-") ? nil : $0 } ?? "run"
        if arguments.first == command { arguments.removeFirst() }

        if command == "run" {
            ServiceMain.run(
                name: "nh-agent", summary: "the client agent: receives notifications on a Linux host", usage: AgentUsage.text, arguments: arguments, configName: "agent.json",
                dataFolder: { AgentIdentity(config: $0, environment: environment).home }
            ) { context in
                let identity = AgentIdentity(config: context.config, environment: environment)
                if let problem = identity.connectionStringProblem {
                    context.logger.error("NH_AGENT_CONNECTION_STRING is not a connection string; the host's listen key is used, if there is one", ("error", problem))
                }
                let store = AgentStore(database: try context.stores.open("agent.db", migrations: AgentSchema.migrations))
                let daemon = try AgentDaemon(context: context, store: store, identity: identity, environment: environment)
                var endpoints: [String: String] = [:]
                // The control socket: by default a Unix socket in the agent's home, which only this
                // user can open (0700), reach (0600) and connect to (the peer's uid is checked).
                guard chmod(identity.home.path, 0o700) == 0 else {
                    throw ConfigError("cannot make the agent's home \(identity.home.path) private (0700): \(String(cString: strerror(errno)))")
                }
                let control = try context.bus.bindRequests(
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

        exit(AgentCommands.run(command, arguments, environment: environment, usage: AgentUsage.text))
    }
}
