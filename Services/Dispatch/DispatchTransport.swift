import Bus
import DispatchCore
import Foundation
import HubProtocol
import ServiceKit

/// The agents' channel as the dispatcher uses it: frames sent to a route without waiting, and
/// messages read with the peer's key. A ZeroMQ ROUTER in the service; a stand-in in tests.
protocol AgentChannel: AnyObject {
    /// Sends a route and one frame; false when the agent's queue is full.
    func send(_ route: Route, _ frame: Data, wait: Bool) throws(ZMQError) -> Bool
    /// Sends frames, the route first; false when the agent's queue is full.
    func send(_ frames: [Data], wait: Bool) throws(ZMQError) -> Bool
    /// The next message waiting, with the peer's key, or nil.
    func receiveFromPeer(wait: Bool) throws(ZMQError) -> (frames: [Data], peer: String?)?
}

extension ZMQSocket: AgentChannel {}

/// Requests to another service, answered later on the loop. A `HubForwarder` in the service; a
/// stand-in in tests.
protocol RequestForwarding: AnyObject {
    func forward<R: HubRequest>(_ request: R, completion: @escaping (Result<R.Reply, HubError>) -> Void)
    /// Fails requests whose answer is overdue.
    func expire(now: Date)
}

extension HubForwarder: RequestForwarding {}
