import Foundation
import HubProtocol
import ServiceKit

ServiceMain.run(name: "nh-agent", summary: "the client agent: receives notifications on a Linux host", dataSubfolder: "agent") { context in
    _ = try context.openStore("agent.db", migrations: AgentSchema.migrations)
    var endpoints: [String: String] = [:]
    let control = try context.bindRequests(context.config.agent.requests) { endpoints }
    endpoints["requests"] = control.endpoint
}
