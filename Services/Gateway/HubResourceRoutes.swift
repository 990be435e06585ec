import Auth
import Bus
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit
import Tags

/// The hub's own resources beside Azure's: its health, signatures for pages that cannot sign,
/// tag expressions checked before a send, and the metrics of every service (`/metrics`, outside
/// the hub's routes).
struct HubResourceRoutes {
    let services: GatewayServices
    /// Absent when the routes run in process, without the loop that feeds event streams.
    let streams: UserStreams?
    /// Responses by method and status, shared by every worker's routes.
    let counts: HTTPCounts

    private var context: ServiceContext { services.context }

    /// `GET /{hub}/health`: each service up or down, with its uptime, version and figures (queue
    /// depths among them), and the gateway's own.
    func health() throws -> HTTPResponse {
        func row(_ service: String, _ reply: HealthReply?) -> GatewayJSON.ServiceHealth {
            guard let reply else { return GatewayJSON.ServiceHealth(service: service, up: false, status: "down") }
            return GatewayJSON.ServiceHealth(
                service: service, up: true, status: reply.status, version: reply.version, pid: reply.pid,
                uptimeSeconds: (reply.uptimeSeconds * 10).rounded() / 10, details: reply.details ?? [:])
        }
        var rows = askServices(HealthRequest()).map { row($0.service, $0.reply) }
        rows.append(row("nh-gateway", context.health([:], details: [
            "userStreams": String(streams?.openCount.load(ordering: .relaxed) ?? 0), "httpThreads": String(context.config.limits.httpThreads),
        ])))
        return GatewayJSON.response(200, GatewayJSON.Health(status: rows.allSatisfy(\.up) ? "ok" : "degraded", services: rows))
    }

    /// `POST /{hub}/signatures`: a shared-access signature made here, for a page that cannot make
    /// one (WebCrypto needs a secure context, which a page loaded over http:// from another machine
    /// is not). The body names a key and holds it, as its connection string does; the token covers
    /// this hub at the address the request came to, for an hour, with that key's rights.
    func signature(_ request: HTTPRequest) throws -> HTTPResponse {
        let body = try GatewayJSON.decode(GatewayJSON.SignatureRequest.self, request.body, "a JSON object with keyName and key, from a connection string")
        let keys = try context.hubs.keys(for: services.current.scope)
        guard let stored = keys.key(named: body.keyName),
            stored.signingKeys.contains(where: { Crypto.constantTimeEqual(Data($0.utf8), Data(body.key.utf8)) })
        else {
            throw HubError(.unauthorized, "no key named '\(body.keyName)' with that value: copy the connection string from nhctl keys")
        }
        try context.takeRate(of: stored)
        let expiresAt = Date().addingTimeInterval(3_600)
        let token = SharedAccessSignature.sign(
            resource: services.hubURL(request).lowercased(), keyName: stored.name, key: body.key, expiry: Int(expiresAt.timeIntervalSince1970))
        return GatewayJSON.response(200, GatewayJSON.Signature(token: token, expiresAt: expiresAt), headers: [("Cache-Control", "no-store")])
    }

    /// `GET /{hub}/expressions/check?expression=…`: parses a tag expression as the publish service
    /// will, so a form can show the error and where it is before anything is sent.
    func checkExpression(_ request: HTTPRequest) throws -> HTTPResponse {
        guard let text = request.query["expression"] else {
            throw HubError(.invalidArgument, "give the tag expression as ?expression=, such as World && !Sports")
        }
        guard text.utf8.count <= context.config.limits.expressionBytes else {
            return GatewayJSON.response(200, GatewayJSON.ExpressionCheck(
                valid: false, code: ErrorCode.invalidExpression.rawValue,
                message: "the tag expression is \(text.utf8.count) bytes; the limit is \(context.config.limits.expressionBytes) (limits.expressionBytes)"))
        }
        do {
            let expression = try TagExpression.parse(text)
            return GatewayJSON.response(200, GatewayJSON.ExpressionCheck(valid: true, tags: Array(Set(expression.tags)).sorted()))
        } catch {
            return GatewayJSON.response(200, GatewayJSON.ExpressionCheck(
                valid: false, code: ErrorCode.invalidExpression.rawValue, message: error.message, position: error.position))
        }
    }

    /// `GET /metrics`: Prometheus text for every service, asked over the bus, and the gateway's own HTTP counts.
    func metrics() -> HTTPResponse {
        var lines: [String] = []
        var up: [(String, Bool)] = []
        for (service, reply) in askServices(MetricsRequest()) {
            up.append((service, reply != nil))
            for (name, value) in (reply?.samples ?? [:]).sorted(by: { $0.key < $1.key }) {
                lines.append(Self.sample(name, service: service, value))
            }
        }
        for (key, count) in counts.snapshot.sorted(by: { $0.key < $1.key }) {
            let parts = key.split(separator: " ")
            lines.append("nh_http_requests_total{service=\"nh-gateway\",method=\"\(parts[0])\",status=\"\(parts[1])\"} \(count)")
        }
        for (status, count) in counts.pushSnapshot.sorted(by: { $0.key < $1.key }) {
            lines.append("nh_push_endpoint_requests_total{service=\"nh-gateway\",status=\"\(status)\"} \(count)")
        }
        for (service, isUp) in up { lines.append("nh_up{service=\"\(service)\"} \(isUp ? 1 : 0)") }
        lines.append("nh_user_streams{service=\"nh-gateway\"} \(streams?.openCount.load(ordering: .relaxed) ?? 0)")
        return HTTPResponse(
            status: 200, headers: [("Content-Type", "text/plain; version=0.0.4")], body: Data((lines.joined(separator: "\n") + "\n").utf8))
    }

    /// Adds the service label to a sample name that may already have labels.
    static func sample(_ name: String, service: String, _ value: Double) -> String {
        let label = "service=\"\(service)\""
        let named = name.contains("{") ? name.replacingOccurrences(of: "{", with: "{\(label),") : "\(name){\(label)}"
        return "\(named) \(value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value))"
    }

    /// Asks every service (not the gateway or an agent) the same question, 500 ms each; a service
    /// that does not answer has no reply (it is down), and why is logged.
    private func askServices<R: HubRequest>(_ request: R) -> [(service: String, reply: R.Reply?)] {
        context.config.serviceEndpoints.filter { $0.service != "nh-gateway" && $0.service != "nh-agent" }.map { service, endpoints in
            do {
                let client = try HubClient(
                    connect: endpoints.requests, policy: RetryPolicy(timeout: 500, attempts: 1), curve: context.bus.security?.client)
                defer { client.close() }
                return (service, try client.call(request, auth: context.serviceToken()))
            } catch {
                context.logger.debug("a service did not answer", ("service", service), ("request", R.messageType), ("error", "\(error)"))
                return (service, nil)
            }
        }
    }
}
