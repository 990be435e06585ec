import Foundation
import HubProtocol
import ServiceKit
import Storage

/// The sync store: per-user notifications, each row holding a notification's latest state and the
/// per-user sequence of its last change, so that "changes since cursor C" is one indexed range
/// read. Deleted and expired notifications become tombstones (no document) until every device has
/// had time to see them. Every change also takes the next number of the change stream and is
/// logged under it, in the same transaction; the stream is published from that log.
///
/// Two engines implement it: SQLite, embedded, the default, whose writes commit together in the
/// service's commit group; and PostgreSQL, which several sync processes can share, whose writes
/// commit in each call. The contract tests (SyncStoreTests) hold both to the same behaviour.
protocol UserNotificationStore: AnyObject {
    /// The change stream's sequence: that of the last change.
    func streamSequence() throws -> UInt64
    /// A user's sequence (of the last change) and floor (cursors below it are too old); 0 and 0
    /// for a user with no change yet.
    func userSequence(_ user: String) throws -> (sequence: UInt64, floor: UInt64)
    /// Stores a post for the user whose key is `user` (`HubScope.key` of the post's userId, which
    /// the notification keeps as its hub's clients know it); the same appNotificationId again
    /// replaces the notification in place, and brings a tombstone back to life as a new notification.
    func post(_ post: PostUserNotification, user: String, expiresAt: Date, now: Date) throws -> (UserNotification, SyncChange)
    /// A live notification of `user`, or nil (also when it belongs to someone else).
    func live(_ id: String, user: String) throws -> UserNotification?
    /// Changes a notification's states. Returns nil for the change when nothing changed; throws
    /// `not_found` when the user has no such live notification.
    func update(_ id: String, user: String, read: ReadState?, action: UserActionState?, origin: String?, now: Date) throws
        -> (UserNotification, SyncChange?)
    /// Turns a live notification into a tombstone; throws `not_found` when there is none.
    func delete(_ id: String, user: String, origin: String?, now: Date) throws -> SyncChange
    /// Turns expired notifications into tombstones, and drops tombstones every device has had
    /// time to see, raising their users' floors.
    func expire(now: Date) throws -> [SyncChange]
    /// Changes after `cursor`, at most `limit`, oldest first. Each notification appears once, in
    /// its latest state: created when the device cannot have seen it, updated, or deleted.
    func changes(user: String, after cursor: UInt64, limit: Int) throws -> UserChanges
    /// The user's live, unexpired notifications and the sequence they stand at, read at one point in time.
    func history(user: String, now: Date) throws -> UserHistory
    func liveCount() throws -> Int
    /// Deletes every notification and user of a deleted hub (`HubScope`); returns how many notifications went.
    func purgeHub(_ scope: HubScope) throws -> Int
    /// Logged changes after `sequence`, in order, at most `limit`. The stream is published from
    /// here, so that every sync process sharing a store publishes every change, in order.
    func streamChanges(after sequence: UInt64, limit: Int) throws -> [SyncChange]
    /// Forgets logged changes but the latest `count`; a reader further behind sees a gap, and
    /// signals every user's devices to fetch.
    func pruneStream(keeping count: Int) throws
    /// Reads one of a user's vault entries (`UserVault`: their key, a pairing under way), unless it
    /// has expired, and writes what `body` leaves in it, in one transaction; nil deletes it.
    func vault<T>(user: String, name: String, now: Date, _ body: (inout VaultEntry?) throws -> T) throws -> T
    /// One of a user's vault entries as committed, unless it has expired: a read alone, outside any
    /// write (every post reads the user's key).
    func vaultEntry(user: String, name: String, now: Date) throws -> VaultEntry?
    /// The group the service serves its requests in when the engine's writes commit together
    /// (SQLite); nil when each write commits in its call (PostgreSQL).
    var commitGroup: CommitGroup? { get }
}

extension UserNotificationStore {
    /// Stores a post of the default hub's user.
    func post(_ post: PostUserNotification, expiresAt: Date, now: Date) throws -> (UserNotification, SyncChange) {
        try self.post(post, user: post.userId, expiresAt: expiresAt, now: now)
    }

    /// Runs `effect` once what was written so far is committed: after the commit group on SQLite
    /// (dropped with it if it fails), at once on PostgreSQL, whose calls have committed already.
    func afterCommit(_ effect: @escaping () throws -> Void) throws {
        if let commitGroup {
            try commitGroup.afterCommit(effect)
        } else {
            try effect()
        }
    }
}

/// A value the sync store keeps for a user beside their notifications, JSON text, until it expires
/// (never when `expiresAt` is nil).
struct VaultEntry: Equatable {
    var value: Data
    var expiresAt: Date?
}

/// One change as the stream carries it: the user's new sequence, under the stream's sequence
/// taken in the same transaction, and the device that made it, if one did.
struct SyncChange: Equatable {
    var streamSequence: UInt64
    var userId: String
    var sequence: UInt64
    var origin: String?

    var message: UserNotificationsChanged { UserNotificationsChanged(userId: userId, sequence: sequence, origin: origin) }
}

/// What both engines do alike with what they read and write: engine-free, no SQL.
enum UserNotificationRecords {
    /// How long a tombstone is kept: longer than any notification can live.
    static let tombstoneRetention: TimeInterval = 31 * 86_400

    static func notFound(_ id: String) -> HubError { HubError(.notFound, "no notification '\(id)' for this user") }

    /// The notification a post makes: under the id of the row of id and document that holds its
    /// appNotificationId (`existing`), keeping the creation time of a live one, or under a new id.
    static func posted(
        _ post: PostUserNotification, existing: (some StoredRow)?, expiresAt: Date, now: Date, decoder: JSONDecoder
    ) throws -> UserNotification {
        let table = "user_notifications"
        let previous = try existing?.optionalData("document", of: table).map { try decoder.decode(UserNotification.self, from: $0) }
        return UserNotification(
            id: try existing?.string("id", of: table) ?? RandomID.timeOrdered(at: now), appNotificationId: post.appNotificationId,
            userId: post.userId, visual: post.visual, raw: post.raw, encrypted: post.encrypted, keyId: post.keyId, priority: post.priority ?? "normal", group: post.group,
            expiresAt: expiresAt, createdAt: previous?.createdAt ?? now, modifiedAt: now)
    }

    /// `notification` with the states given, or nil when that changes nothing.
    static func updated(_ notification: UserNotification, read: ReadState?, action: UserActionState?, now: Date) -> UserNotification? {
        var changed = notification
        if let read { changed.readState = read }
        if let action { changed.userActionState = action }
        guard changed != notification else { return nil }
        changed.modifiedAt = now
        return changed
    }

    /// Refuses a cursor the store's history no longer holds (`history_rewound`: the device syncs in
    /// full), or one below the floor (`expired`).
    static func checkCursor(_ cursor: UInt64, latest: UInt64, floor: UInt64, position: HistoryNumbering.Position) throws(HubError) {
        if case .rewound(let shared) = position {
            let what = cursor > latest ? "is ahead of this user's latest change (\(latest))" : "names changes this store no longer holds"
            throw HubError(.historyRewound, """
                cursor \(cursor) \(what): the store's history was rewound (a failover to a replica that was behind, or a \
                restore to a point in time) and holds this user's changes up to \(shared) of the cursor's history, or the cursor is not this \
                store's. Sync in full: read the history (user.history, or GET users/me/notifications/history) and go on \
                from its cursor
                """)
        }
        if cursor > 0 && cursor < floor {
            throw HubError(.expired, "cursor \(cursor) is older than the oldest change kept (\(floor)); drop the local copy and start again from 0")
        }
    }

    /// The reply to a changes read: at most `limit + 1` rows of id, sequence, created sequence and
    /// document (NULL for a tombstone), in sequence order. Each notification stays the document the
    /// store wrote with `HubCodec`'s encoder, and goes into the reply as it is
    /// (`UserChanges.writtenJSON`): every device fetches every change. A document that is not a
    /// JSON object fails the read, named.
    static func changes(_ rows: [some StoredRow], after cursor: UInt64, limit: Int) throws -> UserChanges {
        var changes: [UserNotificationChange] = []
        changes.reserveCapacity(min(rows.count, limit))
        let table = "user_notifications"
        for row in rows.prefix(limit) {
            let (id, sequence) = (try row.string("id", of: table), try row.sequence("sequence", of: table))
            if let data = try row.optionalData("document", of: table) {
                let created = try row.sequence("created_sequence", of: table)
                changes.append(try UserNotificationChange(kind: created > cursor ? .created : .updated, sequence: sequence, id: id, written: data))
            } else {
                changes.append(UserNotificationChange(kind: .deleted, sequence: sequence, id: id))
            }
        }
        return UserChanges(changes: changes, cursor: changes.last?.sequence ?? cursor, hasMore: rows.count > limit)
    }

    /// A history of rows of documents (a tombstone's is NULL, and left out), standing at `cursor`.
    static func history(_ rows: [some StoredRow], cursor: UInt64, decoder: JSONDecoder) throws -> UserHistory {
        let notifications = try rows.compactMap { row in
            try row.optionalData("document", of: "user_notifications").map { try decoder.decode(UserNotification.self, from: $0) }
        }
        return UserHistory(notifications: notifications, cursor: cursor)
    }

    /// A logged change from its row: sequence (the stream's), user_id, user_sequence, origin.
    static func loggedChange(_ row: some StoredRow) throws -> SyncChange {
        SyncChange(
            streamSequence: try row.sequence("sequence", of: "changes"), userId: try row.string("user_id", of: "changes"),
            sequence: try row.sequence("user_sequence", of: "changes"), origin: try row.optionalString("origin", of: "changes"))
    }
}
