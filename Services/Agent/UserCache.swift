import Foundation
import HubProtocol
import Storage

/// The agent's copy of its user's notifications and the cursor it stands at, kept together so a
/// restart resumes exactly where it stopped.
final class UserCache {
    let database: SQLiteDatabase
    private let encoder = HubCodec.makeEncoder()
    private let decoder = HubCodec.makeDecoder()

    /// What applying a batch did, for the agent's output.
    enum Event: Equatable {
        case created(UserNotification)
        case updated(UserNotification, previous: UserNotification)
        case deleted(UserNotification)
    }

    init(database: SQLiteDatabase) {
        self.database = database
    }

    var cursor: UInt64 {
        get throws {
            // No cursor yet: the cache starts from the beginning.
            guard let row = try database.queryOne("SELECT value FROM settings WHERE key = 'userCursor'") else { return 0 }
            let text = try row.string("value", of: "settings")
            guard let cursor = UInt64(text) else { throw HubError(.internal, "settings.value of userCursor cannot be read: '\(text)' is not a cursor") }
            return cursor
        }
    }

    func notification(_ id: String) throws -> UserNotification? {
        try database.queryOne("SELECT document FROM user_cache WHERE id = ?", [id]).map(decode)
    }

    func all() throws -> [UserNotification] {
        try database.query("SELECT document FROM user_cache").map(decode).sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    }

    private func decode(_ row: Row) throws -> UserNotification {
        try decoder.decode(UserNotification.self, from: try row.data("document", of: "user_cache"))
    }

    /// Applies a batch of changes and moves the cursor, in one transaction. Changes that leave a
    /// notification as the cache already has it raise no event, so nothing is shown twice.
    /// Applies a batch of changes and moves the cursor past it, in one transaction; `beforeCommit`
    /// gets the events first, so that they are written out before the batch counts as seen, and a
    /// crash between the two shows them again rather than never.
    func apply(_ changes: UserChanges, beforeCommit: ([Event]) -> Void = { _ in }) throws {
        try database.transaction {
            var events: [Event] = []
            for change in changes.changes {
                let previous = try notification(change.id)
                if let current = change.notification {
                    try database.run(
                        Self.upsert,
                        [change.id, try encoder.encode(current)])
                    if let previous {
                        if previous != current { events.append(.updated(current, previous: previous)) }
                    } else {
                        events.append(.created(current))
                    }
                } else if let previous {
                    try database.run("DELETE FROM user_cache WHERE id = ?", [change.id])
                    events.append(.deleted(previous))
                }
            }
            try setCursor(changes.cursor)
            // This device's own changes, fetched back: the store has them.
            for change in changes.changes { try database.run("DELETE FROM own_changes WHERE id = ?", [change.id]) }
            beforeCommit(events)
        }
    }

    /// Notes that this device changed notification `id` in the store, until it fetches the change back.
    func changedHere(_ id: String, now: Date = Date()) throws {
        try database.run(
            "INSERT INTO own_changes (id, at) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET at = excluded.at", [id, now.timeIntervalSince1970])
    }

    /// The notifications this device changed whose change it has not fetched back yet.
    var changedHereUnseen: Set<String> {
        get throws { Set(try database.query("SELECT id FROM own_changes").map { try $0.string("id", of: "own_changes") }) }
    }

    /// Takes a state the agent itself just set, so its own output shows it at once.
    func store(_ notification: UserNotification) throws -> Event? {
        let previous = try self.notification(notification.id)
        guard previous != notification else { return nil }
        try database.run(
            Self.upsert,
            [notification.id, try encoder.encode(notification)])
        return previous.map { .updated(notification, previous: $0) } ?? .created(notification)
    }

    func remove(_ id: String) throws -> Event? {
        guard let previous = try notification(id) else { return nil }
        try database.run("DELETE FROM user_cache WHERE id = ?", [id])
        return .deleted(previous)
    }

    /// Makes the copy the store's `history` and stands at its cursor, in one transaction, as when
    /// the store's history was rewound: what the store no longer holds is deleted, and what it holds
    /// is created or updated where the copy differs. Returns what changed, for the agent's output.
    func replace(with history: UserHistory) throws -> [Event] {
        try database.transaction {
            var events: [Event] = []
            let kept = Dictionary(history.notifications.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
            for previous in try all() where kept[previous.id] == nil {
                try database.run("DELETE FROM user_cache WHERE id = ?", [previous.id])
                events.append(.deleted(previous))
            }
            for current in history.notifications {
                if let event = try store(current) { events.append(event) }
            }
            try setCursor(history.cursor)
            try database.run("DELETE FROM own_changes")
            return events
        }
    }

    /// Forgets everything, as when the store says the cursor is too old. Returns the deletions.
    func reset() throws -> [Event] {
        try database.transaction {
            let events = try all().map { Event.deleted($0) }
            try database.run("DELETE FROM user_cache")
            try database.run("DELETE FROM own_changes")
            try setCursor(0)
            return events
        }
    }

    /// Writes a notification. A change to it makes a popup closed on an earlier server instance one to
    /// show again (`AgentUserSync.reshow`); one that is up keeps its id, to be replaced in place.
    static let upsert = """
        INSERT INTO user_cache (id, document) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET document = excluded.document,
            desktop_owner = CASE WHEN desktop_id IS NULL THEN NULL ELSE desktop_owner END
        """

    /// The notification's popup: the server instance it was shown on, and its id there while it is up.
    func popup(_ id: String) throws -> (id: UInt32?, owner: String?) {
        guard let row = try database.queryOne("SELECT desktop_id, desktop_owner FROM user_cache WHERE id = ?", [id]) else { return (nil, nil) }
        return (try row.optionalInt("desktop_id", of: "user_cache").map { UInt32(truncatingIfNeeded: $0) }, try row.optionalString("desktop_owner", of: "user_cache"))
    }

    /// Notes the popup shown (or, with a nil id, gone) on the server `owner`.
    func setPopup(_ id: String, _ popup: UInt32?, owner: String) throws {
        try database.run(
            "UPDATE user_cache SET desktop_id = ?, desktop_owner = ? WHERE id = ?", [popup.map { SQLiteValue.integer(Int64($0)) } ?? .null, owner, id])
    }

    private func setCursor(_ cursor: UInt64) throws {
        try database.run(
            "INSERT INTO settings (key, value) VALUES ('userCursor', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [String(cursor)])
    }
}
