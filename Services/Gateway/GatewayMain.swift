import Auth
import Bus
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit

/// `nh-gateway`'s entry point, called by its executable and by `nh-services` (Services/Executables).
public enum GatewayMain {
    public static func main(_ arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> Never {
        ServiceMain.run(name: "nh-gateway", summary: "the HTTP gateway: the Notification Hubs REST API over the hub's services", arguments: arguments) { context in
            let config = context.config
            try context.prepareKeys()
            HubCatalogFollower.start(context: context)
            let policy = RetryPolicy(timeout: config.requestTimeoutMs, attempts: 1)
            // One set of bus clients per HTTP worker thread, so that a socket is only ever used by its own
            // thread, and as many requests are handled at once as there are workers.
            let counts = HTTPCounts()
            let web = WebPages(folder: WebPages.folder(webRoot: config.webRoot), hub: config.hub)
            if !web.isInstalled {
                context.logger.warning("the web console and inbox are not installed", ("looked in", web.folder.path))
            }
            let streams = try UserStreams(context: context)
            let pushRate = RateLimiter(perSecond: config.limits.pushesPerSecondPerEndpoint)
            let workers = try (0..<config.limits.httpThreads).map { _ in
                let dispatch = try context.bus.client(config.dispatch.requests, policy: policy)
                let peers = try config.outcomeEndpoints.dropFirst().map { try context.bus.client($0, policy: policy) }
                return GatewayRouter(
                    context: context, registry: try context.bus.client(config.registry.requests, policy: policy),
                    publish: try context.bus.client(config.publish.requests, policy: policy),
                    dispatch: dispatch, outcomes: FirstAnswering([dispatch] + peers),
                    sync: try context.bus.client(config.sync.requests, policy: policy), counts: counts, web: web, streams: streams,
                    pushRate: pushRate)
            }
            var tls: (key: String, certificate: String)?
            if let certificatePath = config.gatewayCertificate, let keyPath = config.gatewayKey {
                guard let certificate = try? String(contentsOfFile: certificatePath, encoding: .utf8),
                    let key = try? String(contentsOfFile: keyPath, encoding: .utf8)
                else {
                    throw ConfigError("cannot read gatewayCertificate '\(certificatePath)' or gatewayKey '\(keyPath)'")
                }
                tls = (key, certificate)
            }
            // The HTTP loop reads and writes every connection on a thread of its own, and answers
            // sends itself (`HTTPLoop`); every other request goes to a worker thread.
            let sends = try context.bus.forwarder(config.publish.requests)
            let forwarding = workers[0]
            let parts = config.gatewayListen.split(separator: ":")
            let limits = config.limits
            let server = try HTTPServer(
                address: String(parts[0]), port: UInt16(parts[1]) ?? 7780, tls: tls, maxBodyBytes: config.maxRichBytes / 3 * 4 + 65_536,
                limits: HTTPServer.Limits(
                    workers: limits.httpThreads, connections: limits.httpConnections,
                    connectionsPerAddress: limits.httpConnectionsPerAddress, idleSeconds: limits.httpIdleSeconds),
                callerPolls: true, inline: { request, reply in forwarding.forward(request, to: sends, reply: reply) }
            ) { request, worker in workers[worker].handle(request) }
            let http = HTTPLoop(server: server, sends: sends, logger: context.logger)
            http.start()
            context.onShutdown { http.stop(waiting: TimeInterval(config.requestTimeoutMs) / 1_000) }
            let listening = "\(tls == nil ? "http" : "https")://\(parts[0]):\(server.port)/"
            context.logger.info("listening", ("role", "http"), ("url", listening))
            var endpoints: [String: String] = ["http": listening]
            let control = try context.bus.bindRequests(config.gateway.requests, endpoints: { endpoints })
            endpoints["requests"] = control.endpoint
        }
    }
}
