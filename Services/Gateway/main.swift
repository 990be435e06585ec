import Auth
import Bus
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit

ServiceMain.run(name: "nh-gateway", summary: "the HTTP gateway: the Notification Hubs REST API over the hub's services") { context in
    let config = context.config
    context.prepareKeys()
    let policy = RetryPolicy(timeout: config.requestTimeoutMs, attempts: 1)
    // One set of bus clients per HTTP thread: a request borrows a set for its whole handling, so a
    // socket is only ever used by one thread at a time, and as many requests run at once as threads.
    let counts = HTTPCounts()
    let pool = GatewayPool(try (0..<config.limits.httpThreads).map { _ in
        GatewayRoutes(
            context: context, registry: try context.client(config.registry.requests, policy: policy),
            publish: try context.client(config.publish.requests, policy: policy),
            dispatch: try context.client(config.dispatch.requests, policy: policy),
            sync: try context.client(config.sync.requests, policy: policy), counts: counts)
    })
    var tls: (key: String, certificate: String)?
    if let certificatePath = config.gatewayCertificate, let keyPath = config.gatewayKey {
        guard let certificate = try? String(contentsOfFile: certificatePath, encoding: .utf8),
            let key = try? String(contentsOfFile: keyPath, encoding: .utf8)
        else {
            throw ConfigError("cannot read gatewayCertificate '\(certificatePath)' or gatewayKey '\(keyPath)'")
        }
        tls = (key, certificate)
    }
    let parts = config.gatewayListen.split(separator: ":")
    let limits = config.limits
    let server = try HTTPServer(
        address: String(parts[0]), port: UInt16(parts[1]) ?? 7780, tls: tls, maxBodyBytes: config.maxRichBytes / 3 * 4 + 65_536,
        limits: HTTPServer.Limits(
            threads: limits.httpThreads, connections: limits.httpConnections,
            connectionsPerAddress: limits.httpConnectionsPerAddress, idleSeconds: limits.httpIdleSeconds)
    ) { request in pool.with { $0.handle(request) } }
    context.onShutdown { server.stop() }
    let listening = "\(tls == nil ? "http" : "https")://\(parts[0]):\(server.port)/"
    context.logger.info("listening", ("role", "http"), ("url", listening))
    var endpoints: [String: String] = ["http": listening]
    let control = try context.bindRequests(config.gateway.requests, endpoints: { endpoints })
    endpoints["requests"] = control.endpoint
}

/// The gateway's sets of bus clients, lent to one HTTP request at a time.
final class GatewayPool: @unchecked Sendable {
    private var free: [GatewayRoutes]
    private let condition = NSCondition()

    init(_ routes: [GatewayRoutes]) { free = routes }

    func with<T>(_ body: (GatewayRoutes) -> T) -> T {
        condition.lock()
        while free.isEmpty { condition.wait() }
        let routes = free.removeLast()
        condition.unlock()
        defer {
            condition.lock()
            free.append(routes)
            condition.signal()
            condition.unlock()
        }
        return body(routes)
    }
}
