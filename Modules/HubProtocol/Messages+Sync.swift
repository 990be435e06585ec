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
    public var priority: String
    public var group: String?
    public var expiresAt: Date
    public var readState: ReadState
    public var userActionState: UserActionState
    public var createdAt: Date
    public var modifiedAt: Date

    public init(
        id: String, appNotificationId: String, userId: String, visual: VisualContent? = nil, raw: String? = nil,
        priority: String = "normal", group: String? = nil, expiresAt: Date, readState: ReadState = .unread,
        userActionState: UserActionState = .noInteraction, createdAt: Date, modifiedAt: Date
    ) {
        self.id = id
        self.appNotificationId = appNotificationId
        self.userId = userId
        self.visual = visual
        self.raw = raw
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
    public var priority: String?
    public var group: String?
    /// When it leaves the store; at most 30 days ahead. Absent: the store's default.
    public var expiresAt: Date?

    public init(
        userId: String, appNotificationId: String, visual: VisualContent? = nil, raw: String? = nil,
        priority: String? = nil, group: String? = nil, expiresAt: Date? = nil
    ) {
        self.userId = userId
        self.appNotificationId = appNotificationId
        self.visual = visual
        self.raw = raw
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
    /// The notification as it is now; absent when deleted.
    public var notification: UserNotification?
    public init(kind: Kind, sequence: UInt64, id: String, notification: UserNotification? = nil) {
        self.kind = kind
        self.sequence = sequence
        self.id = id
        self.notification = notification
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
