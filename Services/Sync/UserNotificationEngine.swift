import Foundation
import HubProtocol
import Postgres
import ServiceKit
import Storage
import StoreEngines

/// One engine's statements for the sync store, written with numbered parameters (`$1`).
struct UserNotificationSQL: Sendable {
    /// () → sequence: the stream's.
    var streamSequence: String
    /// (user) → (sequence, floor).
    var userSequence: String
    /// (user) → sequence: the user's next.
    var nextUserSequence: String
    /// () → sequence: the stream's next.
    var nextStreamSequence: String
    /// (stream sequence, user, user sequence, origin).
    var logChange: String
    /// (user, app notification id) → (id, document).
    var posted: String
    /// (id, user, app notification id, document, sequence, expires at).
    var insert: String
    /// (document, sequence, expires at, id): a tombstone comes back to life as a new notification.
    var replace: String
    /// (id, user) → document, when live.
    var live: String
    /// (document, sequence, id).
    var update: String
    /// (sequence, deleted at, id).
    var tombstone: String
    /// (now, cutoff) → 1 when there is anything to expire or drop.
    var expiryDue: String
    /// (now) → (id, user), the live notifications expired by now, by user.
    var expiring: String
    /// (cutoff): raises the floor of each user whose tombstones go.
    var raiseFloors: String
    /// (cutoff): drops tombstones every device has had time to see.
    var dropTombstones: String
    /// (user, after, limit) → (id, sequence, created sequence, document).
    var changes: String
    /// (user, now) → document.
    var history: String
    /// () → count.
    var liveCount: String
    /// (after, limit) → (sequence, user, user sequence, origin).
    var streamChanges: String
    /// (prefix, its length): the notifications of a deleted hub's users, whose keys start with its prefix.
    var purgeHubNotifications: String
    /// (prefix, its length): those users.
    var purgeHubUsers: String
    /// (count, at least 1): keeps the newest `count` changes, counted, not numbered: a new history's
    /// numbers start far above the old one's.
    var pruneStream: String
    /// (user, name, now) → (value, expires at).
    var vaultGet: String
    /// (user, name, value, expires at).
    var vaultPut: String
    /// (user, name).
    var vaultDelete: String
    /// (now): drops expired entries.
    var vaultExpire: String
    /// (prefix, its length): a deleted hub's users' entries.
    var purgeHubVault: String

    /// The statements over tables named with `prefix` (a schema and a dot, or nothing), spelled as
    /// the engine spells numbered parameters; `expiring` and `raiseFloors` are each engine's own.
    init(prefix p: String, expiring: String, raiseFloors: String, spell: (String) -> String = { $0 }) {
        streamSequence = spell("SELECT sequence FROM \(p)stream WHERE id = 1")
        userSequence = spell("SELECT sequence, floor FROM \(p)users WHERE user_id = $1")
        nextUserSequence = spell("""
            INSERT INTO \(p)users (user_id, sequence) VALUES ($1, 1)
            ON CONFLICT (user_id) DO UPDATE SET sequence = \(p)users.sequence + 1 RETURNING sequence
            """)
        nextStreamSequence = spell("UPDATE \(p)stream SET sequence = sequence + 1 WHERE id = 1 RETURNING sequence")
        logChange = spell("INSERT INTO \(p)changes (sequence, user_id, user_sequence, origin) VALUES ($1, $2, $3, $4)")
        posted = spell("SELECT id, document FROM \(p)user_notifications WHERE user_id = $1 AND app_notification_id = $2")
        insert = spell("""
            INSERT INTO \(p)user_notifications (id, user_id, app_notification_id, document, sequence, created_sequence, expires_at)
            VALUES ($1, $2, $3, $4, $5, $5, $6)
            """)
        replace = spell("""
            UPDATE \(p)user_notifications SET document = $1, sequence = $2, expires_at = $3, deleted_at = NULL,
                created_sequence = CASE WHEN deleted_at IS NULL THEN created_sequence ELSE $2 END
            WHERE id = $4
            """)
        live = spell("SELECT document FROM \(p)user_notifications WHERE id = $1 AND user_id = $2 AND deleted_at IS NULL")
        update = spell("UPDATE \(p)user_notifications SET document = $1, sequence = $2 WHERE id = $3")
        tombstone = spell("UPDATE \(p)user_notifications SET document = NULL, sequence = $1, deleted_at = $2 WHERE id = $3")
        expiryDue = spell("""
            SELECT CASE WHEN EXISTS (SELECT 1 FROM \(p)user_notifications WHERE deleted_at IS NULL AND expires_at <= $1)
                OR EXISTS (SELECT 1 FROM \(p)user_notifications WHERE deleted_at IS NOT NULL AND deleted_at < $2)
                OR EXISTS (SELECT 1 FROM \(p)user_vault WHERE expires_at <= $1) THEN 1 ELSE 0 END AS due
            """)
        vaultGet = spell("SELECT value, expires_at FROM \(p)user_vault WHERE user_id = $1 AND name = $2 AND (expires_at IS NULL OR expires_at > $3)")
        vaultPut = spell("""
            INSERT INTO \(p)user_vault (user_id, name, value, expires_at) VALUES ($1, $2, $3, $4)
            ON CONFLICT (user_id, name) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at
            """)
        vaultDelete = spell("DELETE FROM \(p)user_vault WHERE user_id = $1 AND name = $2")
        vaultExpire = spell("DELETE FROM \(p)user_vault WHERE expires_at <= $1")
        purgeHubVault = spell("DELETE FROM \(p)user_vault WHERE substr(user_id, 1, $2) = $1")
        self.expiring = spell(expiring)
        purgeHubNotifications = spell("DELETE FROM \(p)user_notifications WHERE substr(user_id, 1, $2) = $1")
        purgeHubUsers = spell("DELETE FROM \(p)users WHERE substr(user_id, 1, $2) = $1")
        self.raiseFloors = spell(raiseFloors)
        dropTombstones = spell("DELETE FROM \(p)user_notifications WHERE deleted_at IS NOT NULL AND deleted_at < $1")
        changes = spell("""
            SELECT id, sequence, created_sequence, document FROM \(p)user_notifications
            WHERE user_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3
            """)
        history = spell("""
            SELECT document FROM \(p)user_notifications WHERE user_id = $1 AND deleted_at IS NULL AND expires_at > $2
            ORDER BY sequence
            """)
        liveCount = spell("SELECT count(*) AS n FROM \(p)user_notifications WHERE deleted_at IS NULL")
        streamChanges = spell("SELECT sequence, user_id, user_sequence, origin FROM \(p)changes WHERE sequence > $1 ORDER BY sequence LIMIT $2")
        pruneStream = spell("DELETE FROM \(p)changes WHERE sequence < (SELECT sequence FROM \(p)changes ORDER BY sequence DESC LIMIT 1 OFFSET $1 - 1)")
    }
}

/// One engine of the sync store: its statements, its connection, and how it writes and reads
/// (`write`, `read`). The store's behaviour over them lives in this protocol's extension, alike
/// for both engines.
protocol UserNotificationEngine: UserNotificationStore, EngineBacked {
    static var sql: UserNotificationSQL { get }
    var encoder: JSONEncoder { get }
    var decoder: JSONDecoder { get }
    /// Runs `body` as a writing transaction.
    func write<T>(_ body: () throws -> T) throws -> T
    /// A change was logged in the write under way (PostgreSQL tells the other processes at commit).
    func logged(_ change: SyncChange) throws
    /// Takes the user's next sequence, in the write under way.
    func nextUserSequence(_ user: String) throws -> UInt64
    /// What `cursor`, a position of `user`'s whose latest change is `latest`, means in the store's history.
    func check(_ cursor: UInt64, user: String, latest: UInt64) throws -> HistoryNumbering.Position
}

extension UserNotificationEngine {
    private var sql: UserNotificationSQL { Self.sql }

    func streamSequence() throws -> UInt64 { try oneRow(sql.streamSequence).sequence("sequence", of: "stream") }

    func userSequence(_ user: String) throws -> (sequence: UInt64, floor: UInt64) {
        guard let row = try one(sql.userSequence, [user]) else { return (0, 0) }
        return (try row.sequence("sequence", of: "users"), try row.sequence("floor", of: "users"))
    }

    /// One history (SQLite): the next number.
    func nextUserSequence(_ user: String) throws -> UInt64 { try oneRow(sql.nextUserSequence, [user]).sequence("sequence", of: "users") }

    /// One history (SQLite): a cursor is current unless it is ahead of the user's latest change, as
    /// one kept from a store since restored from a backup is.
    func check(_ cursor: UInt64, user: String, latest: UInt64) throws -> HistoryNumbering.Position {
        HistoryNumbering.check(cursor, latest: latest, nextMark: nil)
    }

    /// Numbers the change in the stream and logs it, in the caller's transaction.
    private func change(_ user: String, _ sequence: UInt64, origin: String?) throws -> SyncChange {
        let streamSequence = try oneRow(sql.nextStreamSequence).sequence("sequence", of: "stream")
        let change = SyncChange(streamSequence: streamSequence, userId: user, sequence: sequence, origin: origin)
        try run(sql.logChange, [Int64(change.streamSequence), user, Int64(sequence), origin])
        try logged(change)
        return change
    }

    func post(_ post: PostUserNotification, user: String, expiresAt: Date, now: Date) throws -> (UserNotification, SyncChange) {
        try write {
            let existing = try one(sql.posted, [user, post.appNotificationId])
            let sequence = try nextUserSequence(user)
            let notification = try UserNotificationRecords.posted(post, existing: existing, expiresAt: expiresAt, now: now, decoder: decoder)
            let document = try encoder.encode(notification)
            if existing == nil {
                try run(sql.insert, [notification.id, user, post.appNotificationId, document, Int64(sequence), expiresAt])
            } else {
                // A tombstone comes back to life as a new notification; a live one is replaced.
                try run(sql.replace, [document, Int64(sequence), expiresAt, notification.id])
            }
            return (notification, try change(user, sequence, origin: nil))
        }
    }

    func live(_ id: String, user: String) throws -> UserNotification? {
        guard let row = try one(sql.live, [id, user]) else { return nil }
        return try decoder.decode(UserNotification.self, from: try row.data("document", of: "user_notifications"))
    }

    func update(_ id: String, user: String, read: ReadState?, action: UserActionState?, origin: String?, now: Date) throws
        -> (UserNotification, SyncChange?)
    {
        try write {
            guard let current = try live(id, user: user) else { throw UserNotificationRecords.notFound(id) }
            guard let notification = UserNotificationRecords.updated(current, read: read, action: action, now: now) else {
                return (current, nil)
            }
            let sequence = try nextUserSequence(user)
            try run(sql.update, [try encoder.encode(notification), Int64(sequence), id])
            return (notification, try change(user, sequence, origin: origin))
        }
    }

    func delete(_ id: String, user: String, origin: String?, now: Date) throws -> SyncChange {
        try write {
            guard try live(id, user: user) != nil else { throw UserNotificationRecords.notFound(id) }
            return try tombstone(id, user: user, origin: origin, now: now)
        }
    }

    private func tombstone(_ id: String, user: String, origin: String?, now: Date) throws -> SyncChange {
        let sequence = try nextUserSequence(user)
        try run(sql.tombstone, [Int64(sequence), now, id])
        return try change(user, sequence, origin: origin)
    }

    func expire(now: Date) throws -> [SyncChange] {
        let cutoff = now.addingTimeInterval(-UserNotificationRecords.tombstoneRetention)
        // Looked at every second, by every process sharing a store: a write is opened only when there is work.
        guard try oneRow(sql.expiryDue, [now, cutoff]).bool("due", of: "user_notifications") else { return [] }
        return try write {
            var changes: [SyncChange] = []
            for row in try query(sql.expiring, [now]) {
                let (id, user) = (try row.string("id", of: "user_notifications"), try row.string("user_id", of: "user_notifications"))
                changes.append(try tombstone(id, user: user, origin: nil, now: now))
            }
            try run(sql.raiseFloors, [cutoff])
            try run(sql.dropTombstones, [cutoff])
            try run(sql.vaultExpire, [now])
            return changes
        }
    }

    /// Deletes every notification and user of a deleted hub; returns how many notifications went.
    func purgeHub(_ scope: HubScope) throws -> Int {
        guard !scope.isDefault else { return 0 }
        return try write {
            let count = try run(sql.purgeHubNotifications, [scope.prefix, scope.prefix.count])
            try run(sql.purgeHubUsers, [scope.prefix, scope.prefix.count])
            try run(sql.purgeHubVault, [scope.prefix, scope.prefix.count])
            return count
        }
    }

    func changes(user: String, after cursor: UInt64, limit: Int) throws -> UserChanges {
        try snapshot {
            let (latest, floor) = try userSequence(user)
            try UserNotificationRecords.checkCursor(cursor, latest: latest, floor: floor, position: try check(cursor, user: user, latest: latest))
            let rows = try query(sql.changes, [user, Int64(bitPattern: cursor), limit + 1])
            return try UserNotificationRecords.changes(rows, after: cursor, limit: limit)
        }
    }

    func history(user: String, now: Date) throws -> UserHistory {
        try snapshot {
            let rows = try query(sql.history, [user, now])
            return try UserNotificationRecords.history(rows, cursor: try userSequence(user).sequence, decoder: decoder)
        }
    }

    func liveCount() throws -> Int { try oneRow(sql.liveCount).int("n", of: "user_notifications") }

    func streamChanges(after sequence: UInt64, limit: Int) throws -> [SyncChange] {
        try query(sql.streamChanges, [Int64(clamping: sequence), limit]).map { try UserNotificationRecords.loggedChange($0) }
    }

    func pruneStream(keeping count: Int) throws { try run(sql.pruneStream, [count]) }

    func vaultEntry(user: String, name: String, now: Date) throws -> VaultEntry? {
        try one(sql.vaultGet, [user, name, now]).map { row in
            VaultEntry(value: Data(try row.string("value", of: "user_vault").utf8), expiresAt: try row.optionalDate("expires_at", of: "user_vault"))
        }
    }

    func vault<T>(user: String, name: String, now: Date, _ body: (inout VaultEntry?) throws -> T) throws -> T {
        try write {
            let stored = try vaultEntry(user: user, name: name, now: now)
            var entry = stored
            let result = try body(&entry)
            if entry != stored {
                if let entry {
                    try run(sql.vaultPut, [user, name, String(decoding: entry.value, as: UTF8.self), entry.expiresAt])
                } else {
                    try run(sql.vaultDelete, [user, name])
                }
            }
            return result
        }
    }
}
