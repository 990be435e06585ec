import DispatchCore
import Foundation
import HubProtocol
import ServiceKit

/// What comes in on the agent channel, read: a hello, an acknowledgement or a goodbye for the core, or a
/// refusal to send back. Agents are rate limited per connection, except for acknowledgements: each
/// answers a delivery this dispatcher sent, and a busy agent sends as many as it receives.
struct AgentInbox {
    enum Input {
        case event(DispatchEvent)
        /// Frames to send back on the route, the message unread.
        case refuse([Data])
    }

    let rate: RateLimiter
    let rateSetting: Int
    /// The key the dispatcher knows an installation by, from the one an agent names (`hub/id` by
    /// the hub's name, which the hub catalog turns into its current generation's key).
    let installationKey: (String) -> String

    init(messagesPerSecond: Int, installationKey: @escaping (String) -> String = { $0 }) {
        rate = RateLimiter(perSecond: messagesPerSecond)
        rateSetting = messagesPerSecond
        self.installationKey = installationKey
    }

    /// `frames`: the route, then the message's frames; `peer`: the connection's CURVE key.
    func read(_ frames: [Data], peer: String?, now: TimeInterval = ProcessInfo.processInfo.systemUptime) -> Input? {
        guard frames.count >= 2 else { return nil }
        let route = frames[0]
        let body = Array(frames.dropFirst())
        let isAck = body.count == 1 && body[0].starts(with: Data("ack\n".utf8))
        guard isAck || rate.allow(peer ?? route.base64EncodedString(), now: now) else {
            return refusal(HubError(.rateLimited, "more than \(rateSetting) messages a second from this agent (limits.agentMessagesPerSecond)"))
        }
        if body[0].isEmpty {
            // A JSON envelope behind a delimiter: a client of the older protocol.
            let error = HubError(.unsupportedVersion, "the agent channel speaks compact frames (see HubProtocol's README); upgrade the agent")
            return .refuse([Data(), HubCodec.encodeError(error, id: "")])
        }
        do {
            guard body.count == 1 else {
                throw HubError(.malformedFrames, "the message has \(body.count) frames; each agent-channel message is one frame")
            }
            switch try AgentWire.decode(body[0]) {
            case .hello(let hello):
                return .event(.hello(route: route, peerKey: peer, installationId: installationKey(hello.installationId), registered: hello.registered))
            case .ack(let ack):
                return .event(.ack(route: route, ack))
            case .bye(let bye):
                return .event(.bye(route: route, installationId: installationKey(bye.installationId)))
            case .welcome, .deliver, .signal, .error, .redirect:
                throw HubError(.unknownType, "agents send only 'hello', 'ack' and 'bye' on this channel")
            }
        } catch let error as HubError {
            return refusal(error)
        } catch {
            return refusal(HubError(.malformedFrames, "\(error)"))
        }
    }

    private func refusal(_ error: HubError) -> Input {
        .refuse([AgentWire.encode(.error(ErrorReply(code: error.code, message: error.message)))])
    }
}
