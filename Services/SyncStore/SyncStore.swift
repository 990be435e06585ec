import Foundation
import HubProtocol
import Storage

/// Per-user notifications. Each row holds a notification's latest state and the per-user sequence
/// of its last change, so "changes since cursor C" is one indexed range read. Deleted and expired
/// notifications become tombstones (no document) until every device has had time to see them.
final class SyncStore {
    let database: SQLiteDatabase
    private let encoder = HubCodec.makeEncoder()
    private let decoder = HubCodec.makeDecoder()
    /// How long a tombstone is kept: longer than any notification can live.
    static let tombstoneRetention: TimeInterval = 31 * 86_400

    /// A committed change: the user's new sequence, and the change stream's sequence for its event,
    /// taken in the same transaction so that one commit covers both.
    struct Change {
        let userId: String
        let sequence: UInt64
        let streamSequence: UInt64
    }

    init(database: SQLiteDatabase) {
        self.database = database
    }

    func streamSequence() throws -> UInt64 {
        UInt64(try database.queryOne("SELECT sequence FROM stream WHERE id = 1")?[0].int64 ?? 0)
    }

    private func nextStreamSequence() throws -> UInt64 {
        try database.run("UPDATE stream SET sequence = sequence + 1 WHERE id = 1")
        return try streamSequence()
    }

    func userSequence(_ user: String) throws -> (sequence: UInt64, floor: UInt64) {
        guard let row = try database.queryOne("SELECT sequence, floor FROM users WHERE user_id = ?", [user]) else { return (0, 0) }
        return (UInt64(row[0].int64 ?? 0), UInt64(row[1].int64 ?? 0))
    }

    private func nextUserSequence(_ user: String) throws -> UInt64 {
        try database.run(
            "INSERT INTO users (user_id, sequence) VALUES (?, 1) ON CONFLICT (user_id) DO UPDATE SET sequence = sequence + 1",
            [user])
        return try userSequence(user).sequence
    }

    private func change(_ user: String, _ sequence: UInt64) throws -> Change {
        Change(userId: user, sequence: sequence, streamSequence: try nextStreamSequence())
    }

    /// Stores a post; the same appNotificationId again replaces the notification in place.
    func post(_ post: PostUserNotification, expiresAt: Date, now: Date) throws -> (UserNotification, Change) {
        try database.transaction {
            let existing = try database.queryOne(
                "SELECT id, document FROM user_notifications WHERE user_id = ? AND app_notification_id = ?",
                [post.userId, post.appNotificationId])
            let sequence = try nextUserSequence(post.userId)
            let id = existing?[0].string ?? UUID().uuidString.lowercased()
            let previous = try existing?[1].data.map { try decoder.decode(UserNotification.self, from: $0) }
            let notification = UserNotification(
                id: id, appNotificationId: post.appNotificationId, userId: post.userId, visual: post.visual, raw: post.raw,
                priority: post.priority ?? "normal", group: post.group, expiresAt: expiresAt,
                createdAt: previous?.createdAt ?? now, modifiedAt: now)
            let document = try encoder.encode(notification)
            if existing == nil {
                try database.run(
                    """
                    INSERT INTO user_notifications (id, user_id, app_notification_id, document, sequence, created_sequence, expires_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                    [id, post.userId, post.appNotificationId, document, sequence, sequence, expiresAt.timeIntervalSince1970])
            } else {
                // A tombstone comes back to life as a new notification; a live one is replaced.
                try database.run(
                    """
                    UPDATE user_notifications SET document = ?, sequence = ?, expires_at = ?, deleted_at = NULL,
                        created_sequence = CASE WHEN deleted_at IS NULL THEN created_sequence ELSE ? END
                    WHERE id = ?
                    """,
                    [document, sequence, expiresAt.timeIntervalSince1970, sequence, id])
            }
            return (notification, try change(post.userId, sequence))
        }
    }

    /// A live notification of `user`, or nil (also when it belongs to someone else).
    func live(_ id: String, user: String) throws -> UserNotification? {
        guard let row = try database.queryOne(
            "SELECT document FROM user_notifications WHERE id = ? AND user_id = ? AND deleted_at IS NULL", [id, user]),
            let data = row[0].data
        else { return nil }
        return try decoder.decode(UserNotification.self, from: data)
    }

    /// Changes a notification's states. Returns nil for the change when nothing changed.
    func update(_ id: String, user: String, read: ReadState?, action: UserActionState?, now: Date) throws
        -> (UserNotification, Change?)
    {
        try database.transaction {
            guard var notification = try live(id, user: user) else {
                throw HubError(.notFound, "no notification '\(id)' for this user")
            }
            let before = notification
            if let read { notification.readState = read }
            if let action { notification.userActionState = action }
            guard notification != before else { return (notification, nil) }
            notification.modifiedAt = now
            let sequence = try nextUserSequence(user)
            try database.run(
                "UPDATE user_notifications SET document = ?, sequence = ? WHERE id = ?",
                [try encoder.encode(notification), sequence, id])
            return (notification, try change(user, sequence))
        }
    }

    func delete(_ id: String, user: String, now: Date) throws -> Change {
        try database.transaction {
            guard try live(id, user: user) != nil else { throw HubError(.notFound, "no notification '\(id)' for this user") }
            return try tombstone(id, user: user, now: now)
        }
    }

    private func tombstone(_ id: String, user: String, now: Date) throws -> Change {
        let sequence = try nextUserSequence(user)
        try database.run(
            "UPDATE user_notifications SET document = NULL, sequence = ?, deleted_at = ? WHERE id = ?",
            [sequence, now.timeIntervalSince1970, id])
        return try change(user, sequence)
    }

    /// Turns expired notifications into tombstones, and drops tombstones every device has had time to see.
    func expire(now: Date) throws -> [Change] {
        try database.transaction {
            let rows = try database.query(
                "SELECT id, user_id FROM user_notifications WHERE deleted_at IS NULL AND expires_at <= ? ORDER BY user_id",
                [now.timeIntervalSince1970])
            var changes: [Change] = []
            for row in rows {
                changes.append(try tombstone(row[0].string ?? "", user: row[1].string ?? "", now: now))
            }
            let cutoff = now.timeIntervalSince1970 - Self.tombstoneRetention
            try database.run(
                """
                UPDATE users SET floor = max(floor, (SELECT max(sequence) FROM user_notifications t
                    WHERE t.user_id = users.user_id AND t.deleted_at IS NOT NULL AND t.deleted_at < ?))
                WHERE user_id IN (SELECT user_id FROM user_notifications WHERE deleted_at IS NOT NULL AND deleted_at < ?)
                """, [cutoff, cutoff])
            try database.run("DELETE FROM user_notifications WHERE deleted_at IS NOT NULL AND deleted_at < ?", [cutoff])
            return changes
        }
    }

    /// Changes after `cursor`, at most `limit`, oldest first. Each notification appears once, in its
    /// latest state: created when the device cannot have seen it, updated, or deleted.
    func changes(user: String, after cursor: UInt64, limit: Int) throws -> UserChanges {
        let (latest, floor) = try userSequence(user)
        guard cursor <= latest else {
            throw HubError(.invalidArgument, "cursor \(cursor) is ahead of this user's latest change (\(latest)); start again from your last cursor or 0")
        }
        if cursor > 0 && cursor < floor {
            throw HubError(.expired, "cursor \(cursor) is older than the oldest change kept (\(floor)); drop the local copy and start again from 0")
        }
        let rows = try database.query(
            """
            SELECT id, sequence, created_sequence, document FROM user_notifications
            WHERE user_id = ? AND sequence > ? ORDER BY sequence LIMIT ?
            """, [user, cursor, limit + 1])
        var changes: [UserNotificationChange] = []
        for row in rows.prefix(limit) {
            let id = row[0].string ?? ""
            let sequence = UInt64(row[1].int64 ?? 0)
            if let data = row[3].data {
                let notification = try decoder.decode(UserNotification.self, from: data)
                let created = UInt64(row[2].int64 ?? 0) > cursor
                changes.append(UserNotificationChange(
                    kind: created ? .created : .updated, sequence: sequence, id: id, notification: notification))
            } else {
                changes.append(UserNotificationChange(kind: .deleted, sequence: sequence, id: id))
            }
        }
        return UserChanges(changes: changes, cursor: changes.last?.sequence ?? cursor, hasMore: rows.count > limit)
    }

    func history(user: String, now: Date) throws -> UserHistory {
        try database.transaction {
            let rows = try database.query(
                """
                SELECT document FROM user_notifications WHERE user_id = ? AND deleted_at IS NULL AND expires_at > ?
                ORDER BY sequence
                """, [user, now.timeIntervalSince1970])
            return UserHistory(
                notifications: try rows.compactMap { try $0[0].data.map { try decoder.decode(UserNotification.self, from: $0) } },
                cursor: try userSequence(user).sequence)
        }
    }

    func liveCount() throws -> Int {
        try database.queryOne("SELECT count(*) FROM user_notifications WHERE deleted_at IS NULL")?[0].int ?? 0
    }
}
