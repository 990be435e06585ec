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
            parsed = try Arguments(arguments, valued: ["config"], flags: [])
            config = try ConfigLoader.load(file: parsed[option: "config"] ?? environment["NH_CONFIG"], environment: environment)
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
                var categories = try store.categories
                if command == "subscribe" {
                    categories += parsed.positionals.filter { !categories.contains($0) }
                } else {
                    categories.removeAll { parsed.positionals.contains($0) }
                }
                try store.setCategories(categories)
                let notified = notifyRunningAgent(config, categories)
                print("categories: \(categories.isEmpty ? "(none)" : categories.joined(separator: " "))"
                    + (notified ? " — the running agent registered again" : " — takes effect when the agent starts"))
                return 0
            case "categories":
                let categories = try store.categories
                print(categories.isEmpty ? "(none)" : categories.joined(separator: "\n"))
                return 0
            case "id":
                print(try environment["NH_AGENT_INSTALLATION_ID"] ?? store.installationId())
                return 0
            default:
                return fail("unknown command '\(command)'\n\n\(usage)")
            }
        } catch {
            FileHandle.standardError.write(Data("nh-agent: \(error)\n".utf8))
            return 1
        }
    }

    static func notifyRunningAgent(_ config: HubConfig, _ categories: [String]) -> Bool {
        guard let client = try? HubClient(connect: config.agent.requests, policy: RetryPolicy(timeout: 1_000, attempts: 1)) else {
            return false
        }
        defer { client.close() }
        return (try? client.call(AgentCategoriesChanged(categories: categories))) != nil
    }

    static func fail(_ message: String) -> Int32 {
        FileHandle.standardError.write(Data("nh-agent: \(message)\n".utf8))
        return 2
    }
}
