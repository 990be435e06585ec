import Foundation
import HubProtocol
import Storage
import Testing

@testable import NHAgent

/// The agent's copy of its user's notifications, beside the cursor it stands at.
@Suite("Agent user cache")
struct UserCacheTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    static func cache() throws -> UserCache {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("nh-agent-cache-\(UUID().uuidString).db").path
        let database = try SQLiteDatabase(path: path)
        try database.migrate(AgentSchema.migrations)
        return UserCache(database: database)
    }

    static func notification(_ id: String, read: ReadState = .unread) -> UserNotification {
        UserNotification(
            id: id, appNotificationId: "app-\(id)", userId: "alice", visual: VisualContent(title: id, body: "body"),
            expiresAt: t0.addingTimeInterval(3_600), readState: read, createdAt: t0, modifiedAt: t0)
    }

    @Test("a full sync after the store's history was rewound withdraws what the store lost, and shows the rest once")
    func replaceWithHistory() throws {
        let cache = try Self.cache()
        let (a, b, lost) = (Self.notification("a"), Self.notification("b"), Self.notification("lost"))
        try cache.apply(UserChanges(changes: [a, b, lost].enumerated().map {
            UserNotificationChange(kind: .created, sequence: UInt64($0.offset + 1), id: $0.element.id, notification: $0.element)
        }, cursor: 3, hasMore: false))
        #expect(try cache.cursor == 3)

        // The store now holds a (read on another device meanwhile), b as it was, and c, posted after the failover.
        let readA = Self.notification("a", read: .read), c = Self.notification("c")
        let base = HistoryNumbering.base(epoch: 1)
        let events = try cache.replace(with: UserHistory(notifications: [readA, b, c], cursor: base + 2))
        #expect(events == [.deleted(lost), .updated(readA, previous: a), .created(c)])
        #expect(try cache.all().map(\.id) == ["a", "b", "c"] && cache.notification("a") == readA)
        #expect(try cache.cursor == base + 2)
        // The same history again changes nothing and shows nothing.
        #expect(try cache.replace(with: UserHistory(notifications: [readA, b, c], cursor: base + 2)).isEmpty)
    }

    @Test("a change made on this device is noted until the store hands it back; a full sync forgets the notes")
    func ownChanges() throws {
        let cache = try Self.cache()
        let a = Self.notification("a"), b = Self.notification("b")
        try cache.apply(UserChanges(changes: [
            UserNotificationChange(kind: .created, sequence: 1, id: "a", notification: a),
            UserNotificationChange(kind: .created, sequence: 2, id: "b", notification: b),
        ], cursor: 2, hasMore: false))
        try cache.changedHere("a")
        try cache.changedHere("b")
        #expect(try cache.changedHereUnseen == ["a", "b"])
        // The store hands back the change to a; the one to b never comes: it was lost.
        let readA = Self.notification("a", read: .read)
        try cache.apply(UserChanges(changes: [UserNotificationChange(kind: .updated, sequence: 3, id: "a", notification: readA)], cursor: 3, hasMore: false))
        #expect(try cache.changedHereUnseen == ["b"])
        _ = try cache.replace(with: UserHistory(notifications: [readA, b], cursor: 3))
        #expect(try cache.changedHereUnseen.isEmpty)
    }
}
