import Foundation

/// One message on the agent channel, in its compact form.
///
/// The agent channel carries the hub's busiest traffic — a delivery and an acknowledgement per
/// installation per notification — so it skips the JSON envelope: each message is a few ZeroMQ
/// frames, the first naming it. The connection itself is authenticated once (CURVE), so no
/// message carries a credential. `Modules/HubProtocol/README.md` gives the frames of each.
public enum AgentFrame: Equatable, Sendable {
    /// Agent → dispatcher, at once and then as the heartbeat.
    case hello(AgentHello)
    /// Agent → dispatcher: deliveries shown, and deliveries given up on.
    case ack(AgentAck)
    /// Dispatcher → agent, when a session starts.
    case welcome(AgentWelcome)
    case deliver(AgentDelivery)
    case signal(AgentSignal)
    /// Dispatcher → agent: a message refused, with a stable code.
    case error(ErrorReply)
}

/// Encodes and decodes `AgentFrame`s. Plain functions over frames; no sockets.
public enum AgentWire {
    public static let version = "1"
    /// The most frames a message of the channel has.
    public static let maxFrames = 8

    public enum Verb: String, CaseIterable, Sendable {
        case hello, ack, welcome, deliver, signal, error
    }

    public static func encode(_ frame: AgentFrame) -> [Data] {
        switch frame {
        case .hello(let hello):
            return [verb(.hello), Data(version.utf8), Data(hello.installationId.utf8)]
        case .ack(let ack):
            var frames = [verb(.ack), Data(ack.deliveryIds.joined(separator: "\n").utf8)]
            if let failures = ack.failures, !failures.isEmpty {
                frames.append(Data(failures.map { "\($0.deliveryId)\t\(oneLine($0.reason))" }.joined(separator: "\n").utf8))
            }
            return frames
        case .welcome(let welcome):
            return [verb(.welcome), Data(welcome.installationId.utf8), Data(String(welcome.pending).utf8)]
        case .deliver(let delivery):
            return encodeDelivery(delivery)
        case .signal(let signal):
            return [verb(.signal), Data(signal.userId.utf8), Data(String(signal.sequence).utf8)]
        case .error(let error):
            return [verb(.error), Data(error.code.rawValue.utf8), Data(error.message.utf8)]
        }
    }

    /// The frames of a delivery. The installation id is not sent: a session speaks for one installation.
    public static func encodeDelivery(_ delivery: AgentDelivery) -> [Data] {
        var frames = [
            verb(.deliver), Data(delivery.deliveryId.utf8), Data(delivery.notificationId.utf8),
            Data((delivery.template ?? "").utf8), Data(String(milliseconds(delivery.expiresAt)).utf8),
            Data(delivery.payload.utf8),
        ]
        if let rich = delivery.rich {
            frames.append((try? richEncoder.encode(rich)) ?? Data())
            frames.append(Data((delivery.richTicket ?? "").utf8))
        }
        return frames
    }

    /// Decodes one message. `installationId` fills in a delivery's installation, which the wire
    /// leaves out. Anything that does not check out is a `malformed_frames` error saying what is wrong.
    public static func decode(_ frames: [Data], installationId: String = "") throws(HubError) -> AgentFrame {
        guard let first = frames.first else { throw malformed("the message has no frames") }
        guard frames.count <= maxFrames else {
            throw malformed("the message has \(frames.count) frames; no agent-channel message has more than \(maxFrames)")
        }
        guard let name = String(data: first, encoding: .utf8), let verb = Verb(rawValue: name) else {
            let shown = String(decoding: first.prefix(24), as: UTF8.self)
            throw malformed(
                "the first frame '\(shown)' names no agent-channel message; expected one of \(Verb.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        func text(_ index: Int, _ what: String) throws(HubError) -> String {
            guard index < frames.count else { throw malformed("'\(name)' needs frame \(index + 1), \(what)") }
            guard let value = String(data: frames[index], encoding: .utf8) else {
                throw malformed("'\(name)' frame \(index + 1), \(what), is not UTF-8")
            }
            return value
        }
        func count(_ allowed: ClosedRange<Int>) throws(HubError) {
            guard allowed.contains(frames.count) else {
                let expected = allowed.lowerBound == allowed.upperBound ? "\(allowed.lowerBound)" : "\(allowed.lowerBound) to \(allowed.upperBound)"
                throw malformed("'\(name)' has \(frames.count) frames; it has \(expected)")
            }
        }
        func number<T: FixedWidthInteger>(_ index: Int, _ what: String, as: T.Type) throws(HubError) -> T {
            let value = try text(index, what)
            guard let parsed = T(value) else { throw malformed("'\(name)' \(what) '\(value)' is not a whole number") }
            return parsed
        }
        switch verb {
        case .hello:
            try count(3...3)
            let version = try text(1, "the protocol version")
            guard version == Self.version else {
                throw HubError(.unsupportedVersion, "agent channel version '\(version)' is not spoken here; this dispatcher speaks \(Self.version)")
            }
            let id = try text(2, "the installation id")
            guard !id.isEmpty else { throw malformed("'hello' has an empty installation id") }
            return .hello(AgentHello(installationId: id))
        case .ack:
            try count(2...3)
            let ids = try text(1, "the delivery ids").split(separator: "\n").map(String.init)
            var failures: [DeliveryFailure] = []
            if frames.count == 3 {
                for line in try text(2, "the failures").split(separator: "\n") {
                    guard let tab = line.firstIndex(of: "\t") else {
                        throw malformed("'ack' failure '\(line.prefix(60))' needs a tab between delivery id and reason")
                    }
                    failures.append(DeliveryFailure(deliveryId: String(line[..<tab]), reason: String(line[line.index(after: tab)...])))
                }
            }
            return .ack(AgentAck(deliveryIds: ids, failures: failures.isEmpty ? nil : failures))
        case .welcome:
            try count(3...3)
            return .welcome(AgentWelcome(installationId: try text(1, "the installation id"), pending: try number(2, "pending", as: Int.self)))
        case .deliver:
            guard frames.count == 6 || frames.count == 8 else {
                throw malformed("'deliver' has \(frames.count) frames; it has 6, or 8 with a rich reference and ticket")
            }
            let template = try text(3, "the template name")
            var delivery = AgentDelivery(
                deliveryId: try text(1, "the delivery id"), notificationId: try text(2, "the notification id"),
                installationId: installationId, template: template.isEmpty ? nil : template,
                payload: try text(5, "the payload"),
                expiresAt: Date(timeIntervalSince1970: Double(try number(4, "expiry (milliseconds since 1970)", as: Int64.self)) / 1000))
            if frames.count == 8 {
                do {
                    delivery.rich = try HubCodec.makeDecoder().decode(RichReference.self, from: frames[6])
                } catch {
                    throw malformed("'deliver' frame 7 is not a rich reference: \(error)")
                }
                delivery.richTicket = try text(7, "the rich ticket")
            }
            return .deliver(delivery)
        case .signal:
            try count(3...3)
            return .signal(AgentSignal(userId: try text(1, "the user id"), sequence: try number(2, "sequence", as: UInt64.self)))
        case .error:
            try count(3...3)
            let code = try text(1, "the error code")
            return .error(ErrorReply(code: ErrorCode(rawValue: code) ?? .internal, message: try text(2, "the message")))
        }
    }

    /// Milliseconds since 1970, as deliveries carry their expiry.
    public static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    private static let richEncoder = HubCodec.makeEncoder()

    private static func verb(_ verb: Verb) -> Data { Data(verb.rawValue.utf8) }

    private static func oneLine(_ text: String) -> String {
        String(text.map { $0 == "\n" || $0 == "\t" || $0 == "\r" ? " " : $0 })
    }

    private static func malformed(_ message: String) -> HubError { HubError(.malformedFrames, message) }
}
