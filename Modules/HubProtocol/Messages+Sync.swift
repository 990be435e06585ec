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
    public init(id: String, readState: ReadState? = nil, userActionState: UserActionState? = nil) {
        self.id = id
        self.readState = readState
        self.userActionState = userActionState
    }
}

public struct DeleteUserNotification: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "user.delete"
    public var id: String
    public init(id: String) { self.id = id }
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
