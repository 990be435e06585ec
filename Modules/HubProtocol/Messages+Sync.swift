import Foundation

public enum ReadState: String, Codable, Sendable, CaseIterable {
    case unread, read
}

public enum UserActionState: String, Codable, Sendable, CaseIterable {
    case noInteraction, activated, dismissed, snoozed
}

/// What a person sees: a title and a body.
public struct VisualContent: Codable, Sendable, Equatable {
    public var title: String
    public var body: String
    public init(title: String, body: String) {
        self.title = title
        self.body = body
    }
}

/// A notification held for a user until it expires or is deleted.
public struct UserNotification: Codable, Sendable, Equatable {
    public var id: String
    public var appNotificationId: String
    public var userId: String
    public var visual: VisualContent?
    /// Content for the app itself, not shown as it is.
    public var raw: String?
    /// The content encrypted end to end: one RFC 8291 aes128gcm record, base64url (the sync service's
    /// `EncryptedRecord` checks its framing), which the hub stores and syncs unread.
    public var encrypted: String?
    /// The id of the user's key `encrypted` is for (`UserKey.keyId`).
    public var keyId: String?
    public var priority: String
    public var group: String?
    public var expiresAt: Date
    public var readState: ReadState
    public var userActionState: UserActionState
    public var createdAt: Date
    public var modifiedAt: Date

    public init(
        id: String, appNotificationId: String, userId: String, visual: VisualContent? = nil, raw: String? = nil,
        encrypted: String? = nil, keyId: String? = nil, priority: String = "normal", group: String? = nil, expiresAt: Date,
        readState: ReadState = .unread, userActionState: UserActionState = .noInteraction, createdAt: Date, modifiedAt: Date
    ) {
        self.id = id
        self.appNotificationId = appNotificationId
        self.userId = userId
        self.visual = visual
        self.raw = raw
        self.encrypted = encrypted
        self.keyId = keyId
        self.priority = priority
        self.group = group
        self.expiresAt = expiresAt
        self.readState = readState
        self.userActionState = userActionState
        self.createdAt = createdAt
        self.modifiedAt = modifiedAt
    }
}

/// An app server's post for one user. Posting an `appNotificationId` again replaces that notification.
public struct PostUserNotification: HubRequest {
    public typealias Reply = UserNotificationReply
    public static let messageType: MessageType = "user.post"
    public var userId: String
    public var appNotificationId: String
    public var visual: VisualContent?
    public var raw: String?
    /// The content encrypted end to end for the user, instead of visual and raw: one RFC 8291
    /// aes128gcm record, base64url, whose plaintext is `{"visual": {…}, "raw": …}`.
    public var encrypted: String?
    /// With `encrypted`: the id of the user's key it is encrypted for, as `user.key` answered it.
    /// The hub refuses a record for a key that is no longer the user's current one.
    public var keyId: String?
    public var priority: String?
    public var group: String?
    /// When it leaves the store; at most 30 days ahead. Absent: the store's default.
    public var expiresAt: Date?

    public init(
        userId: String, appNotificationId: String, visual: VisualContent? = nil, raw: String? = nil, encrypted: String? = nil,
        keyId: String? = nil, priority: String? = nil, group: String? = nil, expiresAt: Date? = nil
    ) {
        self.userId = userId
        self.appNotificationId = appNotificationId
        self.visual = visual
        self.raw = raw
        self.encrypted = encrypted
        self.keyId = keyId
        self.priority = priority
        self.group = group
        self.expiresAt = expiresAt
    }
}

public struct UserNotificationReply: HubMessage {
    public static let messageType: MessageType = "user.notification"
    public var notification: UserNotification
    public init(notification: UserNotification) { self.notification = notification }
}

/// "Changes since cursor C, at most N". The user comes from the request's token.
public struct UserChangesRequest: HubRequest {
    public typealias Reply = UserChanges
    public static let messageType: MessageType = "user.changes"
    public var cursor: UInt64
    /// At most this many changes; the store's default is 100.
    public var limit: Int?
    public init(cursor: UInt64, limit: Int? = nil) {
        self.cursor = cursor
        self.limit = limit
    }
}

public struct UserNotificationChange: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable { case created, updated, deleted }
    public var kind: Kind
    public var sequence: UInt64
    public var id: String

    /// The notification as a value, or as the bytes `HubCodec`'s encoder wrote for it (as the sync
    /// store keeps it): those go into a reply as they are, without being read and written again.
    enum Stored: Sendable, Equatable {
        case value(UserNotification)
        case written(Data)
    }
    var stored: Stored?

    /// The notification as it is now; absent when deleted. One given as written bytes is read on
    /// each ask, and absent if they do not read.
    public var notification: UserNotification? {
        get {
            switch stored {
            case .value(let notification): notification
            // Only the store holds written bytes, checked as it read them; encoding them for a reply throws.
            case .written(let data): try? HubCodec.decodeValue(UserNotification.self, from: data)
            case nil: nil
            }
        }
        set { stored = newValue.map(Stored.value) }
    }

    public init(kind: Kind, sequence: UInt64, id: String, notification: UserNotification? = nil) {
        self.kind = kind
        self.sequence = sequence
        self.id = id
        self.stored = notification.map(Stored.value)
    }

    /// A change whose notification is `written`: the bytes `HubCodec`'s encoder (or one made by
    /// `HubCodec.makeEncoder()`) wrote for it. Bytes that one pass cannot read as a JSON object
    /// are refused (`internal`, naming the change), rather than put into a reply.
    public init(kind: Kind, sequence: UInt64, id: String, written: Data) throws(HubError) {
        let isObject = written.withUnsafeBytes { raw in
            HubCodec.scanMembers(raw.bindMemory(to: UInt8.self)) != nil
        }
        guard isObject else {
            throw HubError(.internal, "the stored notification \(id) (change \(sequence)) is not a JSON object; the store is damaged")
        }
        self.kind = kind
        self.sequence = sequence
        self.id = id
        self.stored = .written(written)
    }

    enum CodingKeys: String, CodingKey { case kind, sequence, id, notification }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        kind = try container.decode(Kind.self, forKey: .kind)
        sequence = try container.decode(UInt64.self, forKey: .sequence)
        id = try container.decode(String.self, forKey: .id)
        stored = try container.decodeIfPresent(UserNotification.self, forKey: .notification).map(Stored.value)
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(kind, forKey: .kind)
        try container.encode(sequence, forKey: .sequence)
        try container.encode(id, forKey: .id)
        switch stored {
        case .value(let notification): try container.encode(notification, forKey: .notification)
        case .written(let data): try container.encode(HubCodec.decodeValue(UserNotification.self, from: data), forKey: .notification)
        case nil: break
        }
    }

    /// Equal when they say the same, however their notifications are held (stored bytes that do
    /// not read say no notification).
    public static func == (left: Self, right: Self) -> Bool {
        left.kind == right.kind && left.sequence == right.sequence && left.id == right.id && left.notification == right.notification
    }
}

public struct UserChanges: HubMessage {
    public static let messageType: MessageType = "user.changes.reply"
    public var changes: [UserNotificationChange]
    /// Pass back as `cursor` for what follows.
    public var cursor: UInt64
    public var hasMore: Bool
    public init(changes: [UserNotificationChange], cursor: UInt64, hasMore: Bool) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
    }

    /// The changes as the encoder writes them, with each notification held as written bytes put
    /// in as it is: every device of a user fetches every change, and reading a stored
    /// notification to write it again cost the sync store more than the rest of a fetch.
    public func writtenJSON() -> Data? {
        var out: [UInt8] = []
        out.reserveCapacity(48 + changes.reduce(0) { total, change in
            if case .written(let data) = change.stored { return total + data.count + 80 }
            return total + 400
        })
        out.append(contentsOf: #"{"changes":["#.utf8)
        for (index, change) in changes.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"id":"#.utf8)
            HubCodec.appendString(change.id, to: &out)
            out.append(contentsOf: #","kind":""#.utf8)
            out.append(contentsOf: change.kind.rawValue.utf8)
            let notification: Data? = switch change.stored {
            case .written(let data): data
            case .value(let notification): HubCodec.encodeValue(notification)
            case nil: nil
            }
            if let notification {
                out.append(contentsOf: #"","notification":"#.utf8)
                out.append(contentsOf: notification)
                out.append(contentsOf: #","sequence":"#.utf8)
            } else {
                out.append(contentsOf: #"","sequence":"#.utf8)
            }
            out.append(contentsOf: String(change.sequence).utf8)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: #"],"cursor":"#.utf8)
        out.append(contentsOf: String(cursor).utf8)
        out.append(contentsOf: #","hasMore":"#.utf8)
        out.append(contentsOf: (hasMore ? "true" : "false").utf8)
        out.append(UInt8(ascii: "}"))
        return Data(out)
    }
}

public struct UpdateUserNotificationState: HubRequest {
    public typealias Reply = UserNotificationReply
    public static let messageType: MessageType = "user.state"
    public var id: String
    public var readState: ReadState?
    public var userActionState: UserActionState?
    /// The installation making the change; it is not signalled about its own change.
    public var device: String?
    public init(id: String, readState: ReadState? = nil, userActionState: UserActionState? = nil, device: String? = nil) {
        self.id = id
        self.readState = readState
        self.userActionState = userActionState
        self.device = device
    }
}

public struct DeleteUserNotification: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "user.delete"
    public var id: String
    public var device: String?
    public init(id: String, device: String? = nil) {
        self.id = id
        self.device = device
    }
}

/// The user's current notifications, dismissed ones included, until they expire or are deleted.
public struct UserHistoryRequest: HubRequest {
    public typealias Reply = UserHistory
    public static let messageType: MessageType = "user.history"
    public init() {}
}

public struct UserHistory: HubMessage {
    public static let messageType: MessageType = "user.history.reply"
    public var notifications: [UserNotification]
    /// The user's sequence the history stands at.
    public var cursor: UInt64
    public init(notifications: [UserNotification], cursor: UInt64) {
        self.notifications = notifications
        self.cursor = cursor
    }
}

/// A backend (Manage right) enrolls a user's device: a long-lived credential the agent keeps and
/// trades for short-lived user tokens.
public struct IssueUserCredential: HubRequest {
    public typealias Reply = UserCredential
    public static let messageType: MessageType = "user.credential"
    public var userId: String
    /// Seconds the credential is valid; the default is a year.
    public var lifetime: Int?
    public init(userId: String, lifetime: Int? = nil) {
        self.userId = userId
        self.lifetime = lifetime
    }
}

public struct UserCredential: HubMessage {
    public static let messageType: MessageType = "user.credential.reply"
    public var userId: String
    public var credential: String
    public var expiresAt: Date
    public init(userId: String, credential: String, expiresAt: Date) {
        self.userId = userId
        self.credential = credential
        self.expiresAt = expiresAt
    }
}

/// Trades a user credential for a user token, as when the token expired.
public struct UserTokenRequest: HubRequest {
    public typealias Reply = UserToken
    public static let messageType: MessageType = "user.token"
    public var credential: String
    public init(credential: String) { self.credential = credential }
}

public struct UserToken: HubMessage {
    public static let messageType: MessageType = "user.token.reply"
    public var userId: String
    public var token: String
    public var expiresAt: Date
    public init(userId: String, token: String, expiresAt: Date) {
        self.userId = userId
        self.token = token
        self.expiresAt = expiresAt
    }
}

/// An event on the sync store's change stream: a user's notifications changed up to `sequence`.
/// It is a hint; readers fetch the changes with their cursor.
public struct UserNotificationsChanged: HubMessage {
    public static let messageType: MessageType = "user.changed"
    public var userId: String
    public var sequence: UInt64
    /// The device whose action caused the change, so it need not be signalled.
    public var origin: String?
    public init(userId: String, sequence: UInt64, origin: String? = nil) {
        self.userId = userId
        self.sequence = sequence
        self.origin = origin
    }
}
