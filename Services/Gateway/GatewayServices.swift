import Auth
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit

/// What the handlers of every resource share: one HTTP worker's clients of the hub's services, and
/// the addresses its answers give. Each worker has its own, so a client is used by one thread only.
struct GatewayServices {
    let context: ServiceContext
    let registry: any ServiceCalling
    let publish: any ServiceCalling
    let dispatch: any ServiceCalling
    /// Where outcomes are read: this host's dispatcher, then its peers (`dispatch.peers`), which
    /// read the same store.
    let outcomes: any ServiceCalling
    let sync: any ServiceCalling
    /// The hub of the request this worker is answering: set as its route is found, read by the
    /// handlers and by the bus clients, which name it in every envelope.
    let current: CurrentHub

    /// The hub of the request being answered, as its URL names it.
    var hub: String { current.name }

    /// The hub a request's path names (its first segment, `/{hub}/…`), found from the path alone so
    /// that any thread may ask.
    func scope(of request: HTTPRequest) -> HubScope {
        context.scope(Self.hubSegment(request.path))
    }

    static func hubSegment(_ path: String) -> String {
        let first = path.split(separator: "/").first.map(String.init) ?? ""
        return first.removingPercentEncoding ?? first
    }

    /// A token signed with `key` for the request's hub, for acting for the caller with exactly its rights.
    func token(for key: AccessKey) -> String { context.token(for: key, hub: current.scope.envelopeHub) }

    /// The scheme and host the request came to, which the addresses in its answer start with.
    func baseURL(_ request: HTTPRequest) -> String {
        "\(request.isTLS ? "https" : "http")://\(request.header("host") ?? context.config.gatewayListen)"
    }

    /// The hub's address, as the request reached it (its path names the hub; the HTTP loop's
    /// forwarded sends read it from there, not from `current`).
    func hubURL(_ request: HTTPRequest) -> String { baseURL(request) + "/" + Self.hubSegment(request.path) }

    /// Where a notification's outcome is read.
    func outcomeLocation(_ id: String, _ request: HTTPRequest) -> String {
        "\(hubURL(request))/messages/\(id)?api-version=2015-04"
    }
}

extension ServiceCalling {
    /// A call signed by the caller's own auth provider (a `HubClient`'s), or unsigned for a stand-in.
    func call<R: HubRequest>(_ request: R) throws -> R.Reply { try call(request, auth: nil) }
}

/// The hub of the request a worker is answering (see `GatewayServices.current`). One per worker.
final class CurrentHub: @unchecked Sendable {
    var name: String
    var scope: HubScope

    init(defaultHub: String) {
        name = defaultHub
        scope = HubScope(hub: nil, defaultHub: defaultHub)
    }

    func set(_ name: String, _ scope: HubScope) {
        self.name = name
        self.scope = scope
    }
}
