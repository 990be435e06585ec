import Foundation

/// What a silent notification says about its rich payload; never the payload itself.
public struct RichReference: Codable, Sendable, Equatable {
    /// The payload's SHA-256 in hex: rich payloads are stored by content.
    public var richId: String
    /// Such as image, url, sound or file; the set is open.
    public var richType: String
    public var message: String
    public var contentType: String
    public var size: Int
    /// The user's key the payload is encrypted for end to end (an RFC 8291 record); the device opens
    /// it after the fetch.
    public var keyId: String?

    public init(richId: String, richType: String, message: String, contentType: String, size: Int, keyId: String? = nil) {
        self.richId = richId
        self.richType = richType
        self.message = message
        self.contentType = contentType
        self.size = size
        self.keyId = keyId
    }

    public var sha256: String { richId }
}

/// A backend's rich send: the payload is stored, and the targets get a silent notification
/// carrying only the rich id, type and message.
public struct SendRichNotification: HubRequest {
    public typealias Reply = RichAccepted
    public static let messageType: MessageType = "rich.send"
    public var idempotencyKey: String?
    public var message: String
    public var richType: String
    public var contentType: String
    /// The payload bytes (base64 on the wire).
    public var payload: Data
    /// The SHA-256 the sender computed, in hex; checked when given.
    public var sha256: String?
    public var tagExpression: String?
    public var installationId: String?
    public var userId: String?
    public var timeToLive: Int?
    /// The payload is one RFC 8291 record encrypted end to end for this key of the user's (`userId`
    /// alone then): the hub stores and hands back the record, and the user's devices open it.
    public var keyId: String?

    public init(
        idempotencyKey: String? = nil, message: String, richType: String, contentType: String, payload: Data,
        sha256: String? = nil, tagExpression: String? = nil, installationId: String? = nil, userId: String? = nil,
        timeToLive: Int? = nil, keyId: String? = nil
    ) {
        self.keyId = keyId
        self.idempotencyKey = idempotencyKey
        self.message = message
        self.richType = richType
        self.contentType = contentType
        self.payload = payload
        self.sha256 = sha256
        self.tagExpression = tagExpression
        self.installationId = installationId
        self.userId = userId
        self.timeToLive = timeToLive
    }
}

public struct RichAccepted: HubMessage {
    public static let messageType: MessageType = "rich.accepted"
    public var notificationId: String
    public var richId: String
    public init(notificationId: String, richId: String) {
        self.notificationId = notificationId
        self.richId = richId
    }
}

/// A target's fetch of a rich payload, with the ticket its delivery carried.
public struct RichFetchRequest: HubRequest {
    public typealias Reply = RichPayload
    public static let messageType: MessageType = "rich.fetch"
    public var richId: String
    public var ticket: String
    public init(richId: String, ticket: String) {
        self.richId = richId
        self.ticket = ticket
    }
}

public struct RichPayload: HubMessage {
    public static let messageType: MessageType = "rich.payload"
    public var richId: String
    public var contentType: String
    public var data: Data
    public var expiresAt: Date
    public init(richId: String, contentType: String, data: Data, expiresAt: Date) {
        self.richId = richId
        self.contentType = contentType
        self.data = data
        self.expiresAt = expiresAt
    }
}

/// A delivery the agent could not complete, and why.
public struct DeliveryFailure: Codable, Sendable, Equatable {
    public var deliveryId: String
    public var reason: String
    public init(deliveryId: String, reason: String) {
        self.deliveryId = deliveryId
        self.reason = reason
    }
}
