import Foundation
import HubProtocol
import ServiceKit
import Tags

#if canImport(Glibc)
import Glibc
#endif

let usage = """
    nh-agent: the client agent on a Linux host

    Usage:
      nh-agent [run]                       receive notifications (the daemon)
      nh-agent subscribe CATEGORY...       choose the categories to receive, such as World Sports
      nh-agent unsubscribe CATEGORY...     stop receiving categories
      nh-agent categories                  show the chosen categories
      nh-agent id                          show this agent's installation id
      nh-agent login CREDENTIAL            sign in as a user, with a credential from nhctl user credential
      nh-agent list                        this user's notifications as this agent has them, with states
      nh-agent history                     the user's notifications in the store, dismissed ones included
      nh-agent read|dismiss|activate|snooze|delete ID
                                           change a notification for the user on every device

    Each notification is written to standard output as one JSON line, passed to the command in
    NH_AGENT_HOOK (on standard input and as NH_* variables), and shown on the desktop with
    notify-send when a desktop session is there.

    Environment: NH_AGENT_HOME (default: DATA_DIR/agent), NH_AGENT_CONNECTION_STRING (the listen
    key), NH_BUS_SERVER_KEY (the hub's CURVE public key, from nhctl keys; read from the
    data folder when unset), NH_AGENT_USER_CREDENTIAL (instead of login), NH_AGENT_TEMPLATE, NH_AGENT_HOOK,
    NH_AGENT_INSTALLATION_ID, and the NH_* settings every service reads.
    """

let environment = ProcessInfo.processInfo.environment
var arguments = Array(CommandLine.arguments.dropFirst())
let command = arguments.first.flatMap { $0.hasPrefix("-") ? nil : $0 } ?? "run"
if arguments.first == command { arguments.removeFirst() }

if command == "run" {
    ServiceMain.run(
        name: "nh-agent", summary: "the client agent: receives notifications on a Linux host", arguments: arguments,
        dataFolder: { AgentIdentity(config: $0, environment: environment).home }
    ) { context in
        let identity = AgentIdentity(config: context.config, environment: environment)
        let store = AgentStore(database: try context.openStore("agent.db", migrations: AgentSchema.migrations))
        let daemon = try AgentDaemon(context: context, store: store, identity: identity, environment: environment)
        var endpoints: [String: String] = [:]
        let control = try context.bindRequests(context.config.agent.requests, endpoints: { endpoints }) {
            ["installationId": daemon.installationId, "registered": String(daemon.registered)]
        }
        endpoints["requests"] = control.endpoint
        control.on(AgentUserAction.self) { request in
            guard let userSync = daemon.userSync else {
                throw HubError(.invalidArgument, "this agent is not signed in as a user; run nh-agent login CREDENTIAL")
            }
            try userSync.act(request.payload.id, request.payload.action)
            return Ack()
        }
        // New categories are kept only once the registry took them; a refusal goes back to the
        // command with the registry's words, and the categories in force stay. When the registry
        // cannot be reached, they are kept and registered as soon as it answers.
        control.on(AgentCategoriesChanged.self) { request in
            do {
                try Tag.validate(all: request.payload.categories, limit: context.config.limits.tagsPerInstallation)
            } catch {
                throw HubError(.invalidTag, "categories: \((error as? TagError)?.message ?? "\(error)")")
            }
            do {
                try daemon.register(categories: request.payload.categories)
            } catch let error as HubError where ![.timeout, .unavailable].contains(error.code) {
                throw error
            } catch {
                try store.setCategories(request.payload.categories)
                daemon.register()
                throw HubError(.unavailable, "the registry did not answer (\((error as? HubError)?.message ?? "\(error)")); the categories are kept and registered when it answers")
            }
            try store.setCategories(request.payload.categories)
            return Ack()
        }
        try daemon.start()
    }
}

exit(AgentCommands.run(command, arguments, environment: environment, usage: usage))
