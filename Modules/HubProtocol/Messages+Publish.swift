import Foundation

public enum NotificationFormat: String, Codable, Sendable, CaseIterable {
    /// The body is delivered as it is.
    case native
    /// The body is a property map; each target's template is filled in from it.
    case template
}

/// A backend's send. At most one of tagExpression, installationId, installationIds and userId is set; none is a broadcast.
public struct SendNotification: HubRequest {
    public typealias Reply = SendAccepted
    public static let messageType: MessageType = "notification.send"
    /// A sender's key for this send: a retry with the same key returns the first send's id.
    public var idempotencyKey: String?
    public var format: NotificationFormat
    /// The native payload, for format native.
    public var body: String?
    /// The property map, for format template.
    public var properties: [String: String]?
    public var tagExpression: String?
    public var installationId: String?
    public var userId: String?
    /// Seconds the notification stays deliverable.
    public var timeToLive: Int?
    /// When set, the send waits until then.
    public var scheduledAt: Date?
    /// Set by the publish service for a rich send: the silent notification's reference.
    public var rich: RichReference?
    /// For a native send: the platform whose installations it goes to. Absent: linux.
    public var platform: Platform?
    /// For a native send: the platform's own headers (lowercased names), such as x-wns-type or apns-push-type.
    public var headers: [String: String]?
    /// A test send: the dispatcher keeps what became of each of its first 10 targets (`TestResultsRequest`).
    public var test: Bool?
    /// A batch direct send: these installations, at most 1,000.
    public var installationIds: [String]?
    /// Set by the publish service: the hub the send is for, in lower case (nil: the default hub).
    /// Its installation ids, user and tags are that hub's (`HubScope`).
    public var hub: String?

    public init(
        idempotencyKey: String? = nil, format: NotificationFormat, body: String? = nil,
        properties: [String: String]? = nil, tagExpression: String? = nil, installationId: String? = nil,
        userId: String? = nil, timeToLive: Int? = nil, scheduledAt: Date? = nil, rich: RichReference? = nil,
        platform: Platform? = nil, headers: [String: String]? = nil
    ) {
        self.platform = platform
        self.headers = headers
        self.idempotencyKey = idempotencyKey
        self.format = format
        self.body = body
        self.properties = properties
        self.tagExpression = tagExpression
        self.installationId = installationId
        self.userId = userId
        self.timeToLive = timeToLive
        self.scheduledAt = scheduledAt
        self.rich = rich
    }
}

/// The send is persisted; from here on it will not be lost.
public struct SendAccepted: HubMessage {
    public static let messageType: MessageType = "notification.accepted"
    public var notificationId: String
    public var state: NotificationState
    public init(notificationId: String, state: NotificationState) {
        self.notificationId = notificationId
        self.state = state
    }
}

public enum NotificationState: String, Codable, Sendable, CaseIterable {
    case enqueued = "Enqueued"
    case scheduled = "Scheduled"
    case processing = "Processing"
    case completed = "Completed"
    case noTargetFound = "NoTargetFound"
    case abandoned = "Abandoned"
    case canceled = "Canceled"
}

public struct OutcomeRequest: HubRequest {
    public typealias Reply = NotificationOutcome
    public static let messageType: MessageType = "notification.outcome"
    public var notificationId: String
    public init(notificationId: String) { self.notificationId = notificationId }
}

public struct NotificationOutcome: HubMessage {
    public static let messageType: MessageType = "notification.outcome.reply"
    public var notificationId: String
    public var state: NotificationState
    public var enqueuedAt: Date
    public var startedAt: Date?
    public var endedAt: Date?
    public var targets: Int
    public var delivered: Int
    public var acknowledged: Int
    public var expired: Int
    public var failed: Int
    /// Per platform (apns, linux, …), counts by outcome: Targets, and Success, PnsUnavailable and
    /// the like, as Notification Hubs names them.
    public var platforms: [String: [String: Int]]?
    /// Why a send ended without going out: a scheduled send abandoned because it no longer
    /// validated when its time came.
    public var reason: String?

    public init(
        notificationId: String, state: NotificationState, enqueuedAt: Date, startedAt: Date? = nil,
        endedAt: Date? = nil, targets: Int = 0, delivered: Int = 0, acknowledged: Int = 0, expired: Int = 0,
        failed: Int = 0
    ) {
        self.notificationId = notificationId
        self.state = state
        self.enqueuedAt = enqueuedAt
        self.startedAt = startedAt
        self.endedAt = endedAt
        self.targets = targets
        self.delivered = delivered
        self.acknowledged = acknowledged
        self.expired = expired
        self.failed = failed
    }
}

/// A send the publish service has persisted, numbered in acceptance order.
public struct AcceptedNotification: Codable, Sendable, Equatable {
    public var sequence: UInt64
    public var notificationId: String
    public var send: SendNotification
    public var enqueuedAt: Date
    public var expiresAt: Date

    public init(sequence: UInt64, notificationId: String, send: SendNotification, enqueuedAt: Date, expiresAt: Date) {
        self.sequence = sequence
        self.notificationId = notificationId
        self.send = send
        self.enqueuedAt = enqueuedAt
        self.expiresAt = expiresAt
    }
}

/// The publish service's stream: one message per accepted notification, topic `notification`,
/// under the notification's sequence. Its body is the accepted notification itself, as JSON,
/// when that is at most `inlineLimit` bytes, so that a dispatcher that has planned everything
/// before it plans it at once; otherwise only its id, and the dispatcher pulls it. Either way a
/// message is also the hint that there is more to pull: a lost one costs a pull, never a send.
public enum NotificationStream {
    public static let topic = "notification"
    /// The largest notification carried whole; a larger one is pulled.
    public static let inlineLimit = 64 * 1024

    /// The body of the stream's message for `notification`.
    public static func body(_ notification: AcceptedNotification) -> Data {
        body(
            sequence: notification.sequence, notificationId: notification.notificationId, send: HubCodec.encodeValue(notification.send),
            enqueuedAt: notification.enqueuedAt, expiresAt: notification.expiresAt)
    }

    /// The same, for a notification whose send is at hand as its JSON (as the publish store keeps
    /// it): the notification's JSON is made around those bytes, which are not decoded again.
    public static func body(sequence: UInt64, notificationId: String, send: Data, enqueuedAt: Date, expiresAt: Date) -> Data {
        // Written into an array and handed over once: appending to Data piece by piece costs more
        // than the bytes, and every accepted send is written here.
        var body: [UInt8] = []
        body.reserveCapacity(send.count + notificationId.utf8.count + 128)
        body.append(contentsOf: #"{"enqueuedAt":""#.utf8)
        body.append(contentsOf: WireDate.format(enqueuedAt).utf8)
        body.append(contentsOf: #"","expiresAt":""#.utf8)
        body.append(contentsOf: WireDate.format(expiresAt).utf8)
        body.append(contentsOf: #"","notificationId":"#.utf8)
        appendString(notificationId, to: &body)
        body.append(contentsOf: #","send":"#.utf8)
        body.append(contentsOf: send)
        body.append(contentsOf: #","sequence":\#(sequence)}"#.utf8)
        return body.count <= inlineLimit ? Data(body) : Data(notificationId.utf8)
    }

    /// `text` as a JSON string.
    static func appendString(_ text: String, to data: inout [UInt8]) {
        data.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                data.append(UInt8(ascii: "\\"))
                data.append(byte)
            case 0..<0x20:
                data.append(contentsOf: String(format: "\\u%04x", byte).utf8)
            default:
                data.append(byte)
            }
        }
        data.append(UInt8(ascii: "\""))
    }

    /// The notification a message carries whole under `sequence`; nil for one that carries only an
    /// id (the dispatcher pulls it), or whose body does not read as the notification of that sequence.
    public static func notification(in body: Data, sequence: UInt64) -> AcceptedNotification? {
        // Absent when the body is not this notification: the dispatcher pulls it instead.
        guard body.first == UInt8(ascii: "{"),
            let notification = scanned(body) ?? (try? HubCodec.decoder.decode(AcceptedNotification.self, from: body)),
            notification.sequence == sequence
        else { return nil }
        return notification
    }

    /// A body in the form `body(sequence:…)` writes, read by one scan of its members: the sequence
    /// and the dates from their digits, the id as it stands, and only the send through the decoder.
    /// Nil for anything else (a member more, less or named twice, an id with an escape, a number
    /// that is not plain digits), which the decoder then reads whole, as before.
    static func scanned(_ body: Data) -> AcceptedNotification? {
        body.withUnsafeBytes { (raw: UnsafeRawBufferPointer) -> AcceptedNotification? in
            let bytes = raw.bindMemory(to: UInt8.self)
            guard let members = HubCodec.scanMembers(bytes), members.count == 5 else { return nil }
            func text(_ value: Range<Int>) -> String? { HubCodec.unescapedString(bytes, value, asciiOnly: false) }
            var sequence: UInt64?, id: String?, send: SendNotification?, enqueuedAt: Date?, expiresAt: Date?
            for (name, value) in members {
                let key = UnsafeBufferPointer(rebasing: bytes[name])
                switch key.count {
                case 8 where key.elementsEqual("sequence".utf8):
                    // 19 digits at most, which a UInt64 always holds.
                    guard sequence == nil, let value = HubCodec.plainDigits(bytes, value, atMost: 19) else { return nil }
                    sequence = value
                case 14 where key.elementsEqual("notificationId".utf8):
                    guard id == nil, let value = text(value) else { return nil }
                    id = value
                case 10 where key.elementsEqual("enqueuedAt".utf8):
                    guard enqueuedAt == nil, let value = text(value).flatMap(WireDate.parse) else { return nil }
                    enqueuedAt = value
                case 9 where key.elementsEqual("expiresAt".utf8):
                    guard expiresAt == nil, let value = text(value).flatMap(WireDate.parse) else { return nil }
                    expiresAt = value
                case 4 where key.elementsEqual("send".utf8):
                    // One level below the body's root, as the payload decoder counts depth.
                    // Nil makes the whole body unreadable here, and the dispatcher pulls the notification.
                    guard send == nil, bytes[value.lowerBound] == 0x7b,
                        let value = SendNotification.readWritten(UnsafeRawBufferPointer(rebasing: raw[value]))
                            ?? (try? HubCodec.payloadDecoder.decode(SendNotification.self, from: body.member(at: value)))
                    else { return nil }
                    send = value
                default:
                    return nil
                }
            }
            guard let sequence, let id, let send, let enqueuedAt, let expiresAt else { return nil }
            return AcceptedNotification(sequence: sequence, notificationId: id, send: send, enqueuedAt: enqueuedAt, expiresAt: expiresAt)
        }
    }
}

/// The dispatcher's pull: accepted notifications after `after`, oldest first.
public struct PendingNotificationsRequest: HubRequest {
    public typealias Reply = PendingNotifications
    public static let messageType: MessageType = "notification.pending"
    public var after: UInt64
    public var limit: Int?
    public init(after: UInt64, limit: Int? = nil) {
        self.after = after
        self.limit = limit
    }
}

public struct PendingNotifications: HubMessage {
    public static let messageType: MessageType = "notification.pending.reply"
    public var notifications: [AcceptedNotification]
    /// The sequence of the last accepted notification.
    public var latest: UInt64
    public init(notifications: [AcceptedNotification], latest: UInt64) {
        self.notifications = notifications
        self.latest = latest
    }
}

/// Cancels a scheduled send that has not fired yet.
public struct CancelScheduledNotification: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "notification.cancel"
    public var notificationId: String
    public init(notificationId: String) { self.notificationId = notificationId }
}

/// What became of each of a test send's first targets (at most 10), for `POST /{hub}/messages?test`.
public struct TestResultsRequest: HubRequest {
    public typealias Reply = TestResults
    public static let messageType: MessageType = "notification.test.results"
    public var notificationId: String
    public init(notificationId: String) { self.notificationId = notificationId }
}

public struct TestResult: Codable, Sendable, Equatable {
    public var installationId: String
    public var platform: String
    public var pushChannel: String
    /// What happened, in words; absent while the delivery is still under way.
    public var outcome: String?
    public var success: Bool
    public init(installationId: String, platform: String, pushChannel: String, outcome: String? = nil, success: Bool = false) {
        self.installationId = installationId
        self.platform = platform
        self.pushChannel = pushChannel
        self.outcome = outcome
        self.success = success
    }
}

public struct TestResults: HubMessage {
    public static let messageType: MessageType = "notification.test.results.reply"
    public var results: [TestResult]
    public init(results: [TestResult]) { self.results = results }
}

/// Where an installation is served: its shard, the dispatcher holding that shard, and whether its
/// agent is connected to the dispatcher asked.
public struct PlacementRequest: HubRequest {
    public typealias Reply = Placement
    public static let messageType: MessageType = "dispatch.placement"
    public var installationId: String
    public init(installationId: String) { self.installationId = installationId }
}

public struct Placement: HubMessage, Equatable {
    public static let messageType: MessageType = "dispatch.placement.reply"
    public var installationId: String
    /// 0 to 63, from a hash of the id; it never changes.
    public var shard: Int
    /// The agent endpoint of the dispatcher holding the shard; nil while none is known to hold it.
    public var servedBy: String?
    /// The agent endpoint of the dispatcher that answered.
    public var askedDispatcher: String
    /// Whether the installation's agent has a session with the dispatcher that answered.
    public var connected: Bool

    public init(installationId: String, shard: Int, servedBy: String?, askedDispatcher: String, connected: Bool) {
        self.installationId = installationId
        self.shard = shard
        self.servedBy = servedBy
        self.askedDispatcher = askedDispatcher
        self.connected = connected
    }
}
