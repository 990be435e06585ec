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
    /// Agent → dispatcher, as it stops.
    case bye(AgentBye)
    /// Dispatcher → agent, when a session starts.
    case welcome(AgentWelcome)
    case deliver(AgentDelivery)
    case signal(AgentSignal)
    /// Dispatcher → agent: a message refused, with a stable code.
    case error(ErrorReply)
    /// Dispatcher → agent: another dispatcher serves this installation.
    case redirect(AgentRedirect)
}

/// Encodes and decodes `AgentFrame`s. Each message is one ZeroMQ frame: lines of text, the first
/// naming the message, the last running to the end of the frame for the fields that may hold
/// anything (a payload, an error message). One frame per message matters: CURVE seals each frame
/// on its own, so a message split over six frames costs six encryptions. Plain functions; no sockets.
public enum AgentWire {
    public static let version = "1"

    public enum Verb: String, CaseIterable, Sendable {
        case hello, ack, bye, welcome, deliver, signal, error, redirect
    }

    public static func encode(_ frame: AgentFrame) -> Data {
        switch frame {
        case .hello(let hello):
            return lines(.hello, [version, hello.installationId] + (hello.registered.map { [String($0)] } ?? []))
        case .ack(let ack):
            let failures = (ack.failures ?? []).map { "!\($0.deliveryId)\t\(oneLine($0.reason))" }
            return lines(.ack, ack.deliveryIds + failures)
        case .bye(let bye):
            return lines(.bye, [bye.installationId])
        case .welcome(let welcome):
            return lines(.welcome, [welcome.installationId, String(welcome.pending)])
        case .deliver(let delivery):
            return encodeDelivery(delivery)
        case .signal(let signal):
            return lines(.signal, [signal.userId, String(signal.sequence)])
        case .error(let error):
            return lines(.error, [error.code.rawValue, error.message])
        case .redirect(let redirect):
            return lines(.redirect, [redirect.installationId, redirect.endpoint])
        }
    }

    /// The frame of a delivery. The installation id is not sent: a session speaks for one installation.
    public static func encodeDelivery(_ delivery: AgentDelivery) -> Data {
        DeliveryEncoder.frame(delivery, tail: DeliveryEncoder.tail(delivery))
    }

    /// Encodes deliveries one after another, as the dispatcher sends broadcasts. What follows a
    /// delivery's id (its notification, template, expiry, ticket and payload) is the same for
    /// every delivery of one notification and template, so it is written once and copied after
    /// each id: writing every field again was some 3,000 instructions a delivery. The dispatcher
    /// sends each agent its deliveries of several notifications in a row, so the tails of the
    /// last few are kept. A tail is reused only for the same bytes (Swift's `==` would take two
    /// canonically equivalent strings for one); a rich delivery, whose ticket is its
    /// installation's own, and a tail over `largest` bytes are written whole every time.
    public struct DeliveryEncoder {
        /// A class, so that looking at one kept costs no copy of its fields.
        private final class Tail {
            let notificationId: String
            let template: String?
            let expiresAt: Date
            let payload: String
            let bytes: [UInt8]

            init(_ delivery: AgentDelivery, bytes: [UInt8]) {
                notificationId = delivery.notificationId
                template = delivery.template
                expiresAt = delivery.expiresAt
                payload = delivery.payload
                self.bytes = bytes
            }

            func fits(_ delivery: AgentDelivery) -> Bool {
                expiresAt == delivery.expiresAt && sameBytes(notificationId, delivery.notificationId)
                    && sameBytes(payload, delivery.payload) && sameBytes(template, delivery.template)
            }
        }

        /// The tails kept, at most `kept`; the one kept longest gives way.
        private var tails: [Tail] = []
        private var next = 0
        /// The tail that fitted last: a broadcast's deliveries come in a row.
        private var hit = 0
        /// Tails written rather than found kept.
        public private(set) var tailsWritten = 0
        private static let kept = 64
        /// The longest tail kept: 64 of them hold at most 1 MiB.
        private static let largest = 16 * 1024

        public init() {}

        public mutating func encode(_ delivery: AgentDelivery) -> Data {
            guard delivery.rich == nil && delivery.richTicket == nil else { return Self.frame(delivery, tail: Self.tail(delivery)) }
            return Self.frame(delivery, tail: kept(delivery) ?? newTail(delivery))
        }

        /// The verb, the delivery's id, and `tail`.
        static func frame(_ delivery: AgentDelivery, tail: [UInt8]) -> Data {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(Verb.deliver.rawValue.utf8.count + 1 + delivery.deliveryId.utf8.count + tail.count)
            bytes.append(contentsOf: Verb.deliver.rawValue.utf8)
            bytes.append(UInt8(ascii: "\n"))
            bytes.append(contentsOf: delivery.deliveryId.utf8)
            bytes.append(contentsOf: tail)
            return Data(bytes)
        }

        /// Each field after the delivery id, after a line break.
        static func tail(_ delivery: AgentDelivery) -> [UInt8] {
            // A reference of strings and a number always encodes.
            let rich = delivery.rich.flatMap { try? richEncoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) } ?? ""
            return AgentWire.bytes(
                [delivery.notificationId, delivery.template ?? "", String(milliseconds(delivery.expiresAt)), rich,
                 delivery.richTicket ?? "", delivery.payload], after: [])
        }

        /// The kept tail of `delivery`, looked for from the one that fitted last: an agent is sent
        /// its deliveries of several notifications in the order they were kept.
        private mutating func kept(_ delivery: AgentDelivery) -> [UInt8]? {
            for step in 0..<tails.count {
                let index = (hit + step) % tails.count
                if tails[index].fits(delivery) {
                    hit = index
                    return tails[index].bytes
                }
            }
            return nil
        }

        private mutating func newTail(_ delivery: AgentDelivery) -> [UInt8] {
            let bytes = Self.tail(delivery)
            tailsWritten += 1
            guard bytes.count <= Self.largest else { return bytes }
            let tail = Tail(delivery, bytes: bytes)
            if tails.count < Self.kept {
                hit = tails.count
                tails.append(tail)
            } else {
                hit = next
                tails[next] = tail
                next = (next + 1) % Self.kept
            }
            return bytes
        }

        /// Whether two strings hold the same UTF-8 bytes.
        private static func sameBytes(_ a: String?, _ b: String?) -> Bool {
            guard var a, var b else { return a == nil && b == nil }
            guard a.utf8.count == b.utf8.count else { return false }
            return a.withUTF8 { x in b.withUTF8 { y in x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0 } }
        }
    }

    /// Decodes one message. `installationId` fills in a delivery's installation, which the wire
    /// leaves out. Anything that does not check out is a `malformed_frames` error saying what is wrong.
    public static func decode(_ frame: Data, installationId: String = "") throws(HubError) -> AgentFrame {
        guard !frame.isEmpty else { throw malformed("the message is empty") }
        guard let text = String(validating: frame, as: UTF8.self) else { throw malformed("the message is not UTF-8") }
        // Lines are split on the byte 0x0A, which in UTF-8 is never part of another character, so
        // every line of valid text is valid text too.
        let lines = Lines(text)
        let name = lines.first
        guard let verb = Verb(rawValue: name) else {
            throw malformed(
                "the first line '\(name.prefix(24))' names no agent-channel message; expected one of \(Verb.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        /// The message's fields: `count` lines, the last of which runs to the end.
        func fields(_ count: Int, _ what: String) throws(HubError) -> [String] {
            let parts = lines.rest(count)
            guard lines.hasRest, parts.count == count else {
                throw malformed("'\(name)' has \(lines.hasRest ? parts.count : 0) of its \(count) fields (\(what)), one per line")
            }
            return parts
        }
        func number<T: FixedWidthInteger>(_ value: String, _ what: String, as: T.Type) throws(HubError) -> T {
            guard let parsed = T(value) else { throw malformed("'\(name)' \(what) '\(value.prefix(24))' is not a whole number") }
            return parsed
        }
        switch verb {
        case .hello:
            let parts = try fields(lines.ranges.count >= 3 ? 3 : 2, "version, installation id, and the registered version if known")
            guard parts[0] == Self.version else {
                throw HubError(.unsupportedVersion, "agent channel version '\(parts[0].prefix(24))' is not spoken here; this dispatcher speaks \(Self.version)")
            }
            guard !parts[1].isEmpty, !parts[1].contains("\n") else { throw malformed("'hello' needs one installation id on its second line") }
            let registered = parts.count == 3 ? try number(parts[2], "registered version", as: UInt64.self) : nil
            return .hello(AgentHello(installationId: parts[1], registered: registered))
        case .ack:
            var ids: [String] = []
            var failures: [DeliveryFailure] = []
            for line in lines.rest(.max) where !line.isEmpty {
                if line.utf8.first == UInt8(ascii: "!") {
                    guard let tab = line.firstIndex(of: "\t") else {
                        throw malformed("'ack' failure '\(line.prefix(60))' needs a tab between delivery id and reason")
                    }
                    failures.append(DeliveryFailure(
                        deliveryId: String(line[line.index(after: line.startIndex)..<tab]), reason: String(line[line.index(after: tab)...])))
                } else {
                    ids.append(line)
                }
            }
            return .ack(AgentAck(deliveryIds: ids, failures: failures.isEmpty ? nil : failures))
        case .bye:
            let parts = try fields(1, "installation id")
            guard !parts[0].isEmpty, !parts[0].contains("\n") else { throw malformed("'bye' needs one installation id on its second line") }
            return .bye(AgentBye(installationId: parts[0]))
        case .welcome:
            let parts = try fields(2, "installation id, pending")
            return .welcome(AgentWelcome(installationId: parts[0], pending: try number(parts[1], "pending", as: Int.self)))
        case .deliver:
            let parts = try fields(7, "delivery id, notification id, template, expiry, rich reference, ticket, payload")
            var delivery = AgentDelivery(
                deliveryId: parts[0], notificationId: parts[1], installationId: installationId, template: parts[2].isEmpty ? nil : parts[2],
                payload: parts[6],
                expiresAt: Date(timeIntervalSince1970: Double(try number(parts[3], "expiry (milliseconds since 1970)", as: Int64.self)) / 1000))
            guard !delivery.deliveryId.isEmpty else { throw malformed("'deliver' has an empty delivery id") }
            if !parts[4].isEmpty {
                do {
                    delivery.rich = try HubCodec.makeDecoder().decode(RichReference.self, from: Data(parts[4].utf8))
                } catch {
                    throw malformed("'deliver' line 6 is not a rich reference: \(error)")
                }
                delivery.richTicket = parts[5]
            }
            return .deliver(delivery)
        case .signal:
            let parts = try fields(2, "user id, sequence")
            return .signal(AgentSignal(userId: parts[0], sequence: try number(parts[1], "sequence", as: UInt64.self)))
        case .error:
            let parts = try fields(2, "code, message")
            return .error(ErrorReply(code: ErrorCode(rawValue: parts[0]) ?? .internal, message: parts[1]))
        case .redirect:
            let parts = try fields(2, "installation id, endpoint")
            guard parts[1].hasPrefix("tcp://") || parts[1].hasPrefix("ipc://"), !parts[1].contains("\n") else {
                throw malformed("'redirect' needs a tcp:// or ipc:// endpoint on its third line")
            }
            return .redirect(AgentRedirect(installationId: parts[0], endpoint: parts[1]))
        }
    }

    /// A message's lines, found by one pass over its bytes: the first names the message, the rest
    /// are its fields.
    struct Lines {
        let first: String
        /// Where each line after the first starts and ends, in bytes.
        private(set) var ranges: [Range<Int>]
        private let text: String

        init(_ text: String) {
            var ranges: [Range<Int>] = []
            var firstEnd: Int?
            func scan(_ bytes: UnsafeBufferPointer<UInt8>) {
                var start = 0
                for index in 0..<bytes.count where bytes[index] == UInt8(ascii: "\n") {
                    if firstEnd == nil { firstEnd = index } else { ranges.append(start..<index) }
                    start = index + 1
                }
                if firstEnd != nil { ranges.append(start..<bytes.count) }
            }
            if text.utf8.withContiguousStorageIfAvailable(scan) == nil { Array(text.utf8).withUnsafeBufferPointer(scan) }
            let utf8 = text.utf8
            let end = firstEnd.map { utf8.index(utf8.startIndex, offsetBy: $0) } ?? utf8.endIndex
            first = String(Substring(utf8[..<end]))
            self.ranges = ranges
            self.text = text
        }

        /// Whether there is anything after the first line (even an empty line).
        var hasRest: Bool { !ranges.isEmpty }

        /// The lines after the first, at most `count`: the last of them runs to the end.
        func rest(_ count: Int) -> [String] {
            guard !ranges.isEmpty, count > 0 else { return [] }
            let taken = min(count, ranges.count)
            var parts: [String] = []
            parts.reserveCapacity(taken)
            let utf8 = text.utf8
            func string(_ range: Range<Int>) -> String {
                let from = utf8.index(utf8.startIndex, offsetBy: range.lowerBound)
                return String(Substring(utf8[from..<utf8.index(from, offsetBy: range.count)]))
            }
            for range in ranges.prefix(taken - 1) { parts.append(string(range)) }
            parts.append(string(ranges[taken - 1].lowerBound..<ranges[ranges.count - 1].upperBound))
            return parts
        }
    }

    /// Milliseconds since 1970, as deliveries carry their expiry.
    public static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    private static let richEncoder = HubCodec.makeEncoder()

    private static func lines(_ verb: Verb, _ fields: String...) -> Data { lines(verb, fields) }

    /// The verb and the fields, a line each, written once into a buffer of their size (bytes are
    /// appended to an array: appending to `Data` piece by piece costs many times more).
    private static func lines(_ verb: Verb, _ fields: [String]) -> Data {
        Data(bytes(fields, after: Array(verb.rawValue.utf8)))
    }

    /// `start`, then each field after a line break.
    private static func bytes(_ fields: [String], after start: [UInt8]) -> [UInt8] {
        var count = start.count
        for field in fields { count += 1 + field.utf8.count }
        var bytes = start
        bytes.reserveCapacity(count)
        for field in fields {
            bytes.append(UInt8(ascii: "\n"))
            bytes.append(contentsOf: field.utf8)
        }
        return bytes
    }

    private static func oneLine(_ text: String) -> String {
        String(text.map { $0 == "\n" || $0 == "\t" || $0 == "\r" ? " " : $0 })
    }

    private static func malformed(_ message: String) -> HubError { HubError(.malformedFrames, message) }
}
