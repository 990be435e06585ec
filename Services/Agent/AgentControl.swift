import Foundation
import HubProtocol
import ServiceKit
import Tags

/// The running agent's control requests, from its own commands on the same host: what a person
/// does to a user's notification, new categories, and the apps registered for push. Each is a
/// method, reachable in process; `install(on:)` serves them.
struct AgentControl {
    let store: AgentStore
    let tagLimit: Int
    /// Changes a user's notification for every device; nil when the agent is not signed in as a user.
    let act: ((String, AgentUserAction.Action) throws -> Void)?
    /// Registers the installation with these categories now, throwing what the registry answered.
    let register: ([String]) throws -> Void
    /// Registers again as soon as the registry answers.
    let registerLater: () -> Void
    let apps: () throws -> [AgentApp]
    let removeApp: (String) throws -> Void

    func install(on server: HubServer) {
        server.on(AgentUserAction.self) { try userAction($0.payload) }
        server.on(AgentCategoriesChanged.self) { try categoriesChanged($0.payload) }
        server.on(AgentAppsRequest.self) { _ in AgentApps(apps: try apps()) }
        server.on(AgentAppRemove.self) { request in
            try removeApp(request.payload.app)
            return Ack()
        }
    }

    func userAction(_ request: AgentUserAction) throws -> Ack {
        guard let act else { throw HubError(.invalidArgument, "this agent is not signed in as a user; run nh-agent login CREDENTIAL") }
        try act(request.id, request.action)
        return Ack()
    }

    /// New categories are kept only once the registry took them; a refusal goes back to the
    /// command with the registry's words, and the categories in force stay. When the registry
    /// cannot be reached, they are kept and registered as soon as it answers.
    func categoriesChanged(_ request: AgentCategoriesChanged) throws -> Ack {
        do {
            try Tag.validate(all: request.categories, limit: tagLimit)
        } catch {
            throw HubError(.invalidTag, "categories: \(error.message)")
        }
        do {
            try register(request.categories)
        } catch let error as HubError where ![.timeout, .unavailable].contains(error.code) {
            throw error
        } catch {
            try store.setCategories(request.categories)
            registerLater()
            throw HubError(.unavailable, "the registry did not answer (\((error as? HubError)?.message ?? "\(error)")); the categories are kept and registered when it answers")
        }
        try store.setCategories(request.categories)
        return Ack()
    }
}
