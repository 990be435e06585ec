import Foundation
import HubProtocol
import ServiceKit
import Storage

ServiceMain.run(name: "nh-publish", summary: "the publish service: accepts notifications from backends") { context in
    _ = try context.openStore("publish.db", migrations: PublishSchema.migrations)
    var endpoints: [String: String] = [:]
    let server = try context.bindRequests(context.config.publish.requests) { endpoints }
    endpoints["requests"] = server.endpoint
}
