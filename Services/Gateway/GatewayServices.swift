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

    var hub: String { context.config.hub }

    /// The scheme and host the request came to, which the addresses in its answer start with.
    func baseURL(_ request: HTTPRequest) -> String {
        "\(request.isTLS ? "https" : "http")://\(request.header("host") ?? context.config.gatewayListen)"
    }

    /// The hub's address, as the request reached it.
    func hubURL(_ request: HTTPRequest) -> String { baseURL(request) + "/" + hub }

    /// Where a notification's outcome is read.
    func outcomeLocation(_ id: String, _ request: HTTPRequest) -> String {
        "\(hubURL(request))/messages/\(id)?api-version=2015-04"
    }
}

extension ServiceCalling {
    /// A call signed by the caller's own auth provider (a `HubClient`'s), or unsigned for a stand-in.
    func call<R: HubRequest>(_ request: R) throws -> R.Reply { try call(request, auth: nil) }
}
