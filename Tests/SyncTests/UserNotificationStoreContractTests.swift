import Foundation
import HubProtocol
import Storage
import Synchronization
import Testing

@testable import NHSync
@testable import ServiceKit

/// What every engine of the sync store must do alike.
@Suite("User notification store contract")
struct UserNotificationStoreContractTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let hour: TimeInterval = 3_600

    static func post(_ user: String, _ app: String, title: String = "Title") -> PostUserNotification {
        PostUserNotification(userId: user, appNotificationId: app, visual: VisualContent(title: title, body: "body of \(app)"))
    }

    /// Posts at `at`, to expire `lifetime` seconds later.
    @discardableResult
    static func post(
        _ store: any UserNotificationStore, _ user: String, _ app: String, title: String = "Title", at: Date = now,
        lifetime: TimeInterval = hour
    ) throws -> (UserNotification, SyncChange) {
        try store.post(post(user, app, title: title), expiresAt: at.addingTimeInterval(lifetime), now: at)
    }

    /// The code of the HubError `body` throws, or nil when it throws none.
    static func code(_ body: () throws -> Void) -> ErrorCode? {
        do {
            try body()
            return nil
        } catch let error as HubError {
            return error.code
        } catch {
            return .internal
        }
    }

    @Test("a post takes the user's next sequence and the stream's; the same appNotificationId replaces it in place",
          arguments: StoreEngine.available)
    func postAndReplace(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        #expect(try store.streamSequence() == 0)
        #expect(try store.userSequence("alice") == (0, 0))
        let (first, created) = try Self.post(store, "alice", "welcome", title: "Hi")
        #expect(created == SyncChange(streamSequence: 1, userId: "alice", sequence: 1))
        #expect(first.userId == "alice" && first.appNotificationId == "welcome" && first.visual?.title == "Hi")
        #expect(first.readState == .unread && first.userActionState == .noInteraction && first.priority == "normal")
        #expect(first.createdAt == Self.now && first.modifiedAt == Self.now && first.expiresAt == Self.now.addingTimeInterval(Self.hour))
        #expect(try store.live(first.id, user: "alice") == first)
        #expect(try store.live(first.id, user: "bob") == nil, "another user's notification is not found")
        #expect(try store.live("missing", user: "alice") == nil)

        let later = Self.now.addingTimeInterval(60)
        let (replaced, replacing) = try Self.post(store, "alice", "welcome", title: "Hello again", at: later)
        #expect(replaced.id == first.id && replaced.visual?.title == "Hello again")
        #expect(replaced.createdAt == Self.now && replaced.modifiedAt == later)
        #expect(replacing == SyncChange(streamSequence: 2, userId: "alice", sequence: 2))
        #expect(try store.live(first.id, user: "alice") == replaced)

        let (other, elsewhere) = try Self.post(store, "bob", "welcome")
        #expect(other.id != first.id)
        #expect(elsewhere == SyncChange(streamSequence: 3, userId: "bob", sequence: 1), "each user has a sequence of their own")
        #expect(try store.liveCount() == 2)
        #expect(try store.streamSequence() == 3)
        #expect(try store.userSequence("alice") == (2, 0) && store.userSequence("bob") == (1, 0))

        // A device that has seen nothing gets it as created, in its latest state; one that saw the
        // first post gets it as updated.
        let fresh = try store.changes(user: "alice", after: 0, limit: 100)
        #expect(fresh.changes.map(\.kind) == [.created] && fresh.changes.first?.notification == replaced)
        #expect(fresh.cursor == 2 && !fresh.hasMore)
        #expect(try store.changes(user: "alice", after: 1, limit: 100).changes.map(\.kind) == [.updated])
        #expect(try store.changes(user: "alice", after: 2, limit: 100).changes.isEmpty)
    }

    @Test("state changes: read, dismiss, activate, snooze, both at once; nothing changed takes no sequence",
          arguments: StoreEngine.available)
    func stateChanges(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (notification, _) = try Self.post(store, "alice", "a")
        let later = Self.now.addingTimeInterval(30)
        let (read, change) = try store.update(notification.id, user: "alice", read: .read, action: nil, origin: "phone", now: later)
        #expect(read.readState == .read && read.userActionState == .noInteraction && read.modifiedAt == later)
        #expect(change == SyncChange(streamSequence: 2, userId: "alice", sequence: 2, origin: "phone"))

        let (same, none) = try store.update(
            notification.id, user: "alice", read: .read, action: nil, origin: "phone", now: later.addingTimeInterval(1))
        #expect(none == nil && same == read, "the same state again is no change")
        #expect(try store.streamSequence() == 2 && store.userSequence("alice").sequence == 2)

        for (index, action) in [UserActionState.dismissed, .activated, .snoozed, .noInteraction].enumerated() {
            let (updated, change) = try store.update(notification.id, user: "alice", read: nil, action: action, origin: nil, now: later)
            #expect(updated.userActionState == action && updated.readState == .read)
            #expect(change?.sequence == UInt64(3 + index) && change?.streamSequence == UInt64(3 + index))
        }
        let (both, last) = try store.update(notification.id, user: "alice", read: .unread, action: .dismissed, origin: "tablet", now: later)
        #expect(both.readState == .unread && both.userActionState == .dismissed)
        #expect(last == SyncChange(streamSequence: 7, userId: "alice", sequence: 7, origin: "tablet"))
        #expect(try store.live(notification.id, user: "alice") == both)

        #expect(Self.code { _ = try store.update("missing", user: "alice", read: .read, action: nil, origin: nil, now: later) } == .notFound)
        #expect(Self.code { _ = try store.update(notification.id, user: "bob", read: .read, action: nil, origin: nil, now: later) } == .notFound)
        #expect(try store.streamSequence() == 7 && store.userSequence("bob") == (0, 0), "a refused change takes no sequence")

        let changes = try store.changes(user: "alice", after: 1, limit: 100)
        #expect(changes.changes.map(\.kind) == [.updated] && changes.changes.first?.notification == both && changes.cursor == 7)
    }

    @Test("a delete leaves a tombstone that devices see as deleted; posting the same appNotificationId again brings it back",
          arguments: StoreEngine.available)
    func deleteToTombstone(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (gone, _) = try Self.post(store, "alice", "a")
        let (kept, _) = try Self.post(store, "alice", "b")
        let later = Self.now.addingTimeInterval(60)
        #expect(try store.delete(gone.id, user: "alice", origin: "laptop", now: later)
                == SyncChange(streamSequence: 3, userId: "alice", sequence: 3, origin: "laptop"))
        #expect(try store.live(gone.id, user: "alice") == nil)
        #expect(try store.liveCount() == 1)
        #expect(Self.code { _ = try store.delete(gone.id, user: "alice", origin: nil, now: later) } == .notFound)
        #expect(Self.code { _ = try store.delete(kept.id, user: "bob", origin: nil, now: later) } == .notFound)
        #expect(Self.code { _ = try store.update(gone.id, user: "alice", read: .read, action: nil, origin: nil, now: later) } == .notFound)
        #expect(try store.streamSequence() == 3)

        let all = try store.changes(user: "alice", after: 0, limit: 100)
        #expect(all.changes.map(\.kind) == [.created, .deleted] && all.changes.map(\.id) == [kept.id, gone.id])
        #expect(all.changes[1].notification == nil && all.changes[1].sequence == 3)
        #expect(try store.changes(user: "alice", after: 2, limit: 100).changes.map(\.kind) == [.deleted])
        let history = try store.history(user: "alice", now: later)
        #expect(history.notifications == [kept] && history.cursor == 3)

        let (back, change) = try Self.post(store, "alice", "a", title: "Back", at: later)
        #expect(back.id == gone.id && back.createdAt == later, "a new notification under the same id")
        #expect(change.sequence == 4)
        #expect(try store.changes(user: "alice", after: 3, limit: 100).changes.map(\.kind) == [.created])
        #expect(try store.changes(user: "alice", after: 0, limit: 100).changes.map(\.id) == [kept.id, gone.id])
        #expect(try store.liveCount() == 2)
    }

    @Test("expired notifications become tombstones; tombstones past their retention go and raise the floor",
          arguments: StoreEngine.available)
    func expiryAndFloor(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (short, _) = try Self.post(store, "alice", "short", lifetime: 10)
        let (long, _) = try Self.post(store, "alice", "long", lifetime: 40 * 86_400)
        try Self.post(store, "bob", "short", lifetime: 10)
        #expect(try store.expire(now: Self.now.addingTimeInterval(5)).isEmpty)

        let after = Self.now.addingTimeInterval(11)
        let history = try store.history(user: "alice", now: after)
        #expect(history.notifications == [long] && history.cursor == 2, "history leaves out what has expired")
        #expect(try store.expire(now: after) == [
            SyncChange(streamSequence: 4, userId: "alice", sequence: 3), SyncChange(streamSequence: 5, userId: "bob", sequence: 2),
        ])
        #expect(try store.expire(now: after).isEmpty)
        #expect(try store.live(short.id, user: "alice") == nil && store.liveCount() == 1)
        #expect(try store.changes(user: "alice", after: 2, limit: 100).changes.map(\.kind) == [.deleted])

        // Kept for the retention: a device at any cursor still catches up.
        let retention = UserNotificationRecords.tombstoneRetention
        #expect(try store.expire(now: after.addingTimeInterval(retention - 1)).isEmpty)
        #expect(try store.userSequence("alice") == (3, 0))
        #expect(try store.changes(user: "alice", after: 1, limit: 100).changes.map(\.id) == [long.id, short.id])

        // Dropped after it: cursors below the floor are too old; 0 starts again.
        #expect(try store.expire(now: after.addingTimeInterval(retention + 1)).isEmpty, "dropping tombstones is no change")
        #expect(try store.userSequence("alice") == (3, 3) && store.userSequence("bob") == (2, 2))
        #expect(try store.streamSequence() == 5)
        #expect(Self.code { _ = try store.changes(user: "alice", after: 2, limit: 100) } == .expired)
        #expect(Self.code { _ = try store.changes(user: "alice", after: 1, limit: 100) } == .expired)
        #expect(Self.code { _ = try store.changes(user: "bob", after: 1, limit: 100) } == .expired)
        let restart = try store.changes(user: "alice", after: 0, limit: 100)
        #expect(restart.changes.map(\.id) == [long.id] && restart.changes.map(\.kind) == [.created])
        #expect(try store.changes(user: "alice", after: 3, limit: 100).changes.isEmpty)
        #expect(Self.code { _ = try store.changes(user: "alice", after: 4, limit: 100) } == .historyRewound, "a cursor ahead of the user")
        #expect(Self.code { _ = try store.changes(user: "nobody", after: 1, limit: 100) } == .historyRewound)
    }

    @Test("changes since a cursor come in sequence order, a page at a time, each notification once", arguments: StoreEngine.available)
    func changesInPages(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        var ids: [String] = []
        for index in 0..<5 { ids.append(try Self.post(store, "alice", "n\(index)").0.id) }
        try Self.post(store, "bob", "n0")
        _ = try store.update(ids[1], user: "alice", read: .read, action: nil, origin: nil, now: Self.now)
        // Sequences: n0 1, n1 2 then 6, n2 3, n3 4, n4 5.
        var page = try store.changes(user: "alice", after: 0, limit: 2)
        #expect(page.changes.map(\.id) == [ids[0], ids[2]] && page.changes.map(\.sequence) == [1, 3])
        #expect(page.cursor == 3 && page.hasMore)
        page = try store.changes(user: "alice", after: page.cursor, limit: 2)
        #expect(page.changes.map(\.id) == [ids[3], ids[4]] && page.cursor == 5 && page.hasMore)
        page = try store.changes(user: "alice", after: page.cursor, limit: 2)
        #expect(page.changes.map(\.id) == [ids[1]] && page.changes.map(\.kind) == [.updated] && page.cursor == 6 && !page.hasMore)
        page = try store.changes(user: "alice", after: page.cursor, limit: 2)
        #expect(page.changes.isEmpty && page.cursor == 6 && !page.hasMore)
        page = try store.changes(user: "alice", after: 3, limit: 3)
        #expect(page.changes.map(\.sequence) == [4, 5, 6] && !page.hasMore, "a page exactly as long as what is left")
        let everything = try store.changes(user: "alice", after: 0, limit: 100)
        #expect(everything.changes.map(\.kind) == Array(repeating: .created, count: 5))
        #expect(everything.changes.first { $0.id == ids[1] }?.notification?.readState == .read)

        let history = try store.history(user: "alice", now: Self.now)
        #expect(history.notifications.map(\.appNotificationId) == ["n0", "n2", "n3", "n4", "n1"] && history.cursor == 6)
        #expect(try store.history(user: "nobody", now: Self.now) == UserHistory(notifications: [], cursor: 0))
    }

    @Test("a page of changes goes out as the encoder writes it, each notification as stored; a stored one that is not JSON fails the read, named")
    func changesAsStored() throws {
        let (store, path) = try StoreEngine.sqliteStore()
        let now = Date(timeIntervalSince1970: 1_800_000_000.123_456)
        let first = try store.post(Self.post("alice", "a", title: #"naïve "quoted" \ 🎉"#), expiresAt: now.addingTimeInterval(3_600), now: now).0
        let second = try store.post(Self.post("alice", "b"), expiresAt: now.addingTimeInterval(60), now: now.addingTimeInterval(0.000_7)).0
        _ = try store.update(second.id, user: "alice", read: .read, action: .dismissed, origin: "d1", now: now.addingTimeInterval(1.5))
        let page = try store.changes(user: "alice", after: 0, limit: 10)
        let values = UserChanges(
            changes: page.changes.map { UserNotificationChange(kind: $0.kind, sequence: $0.sequence, id: $0.id, notification: $0.notification) },
            cursor: page.cursor, hasMore: page.hasMore)
        #expect(page.changes.compactMap(\.notification).map(\.id) == [first.id, second.id])
        #expect(try #require(page.writtenJSON()) == (try HubCodec.makeEncoder().encode(values)))
        #expect(try HubCodec.decodeReply(UserChanges.self, from: HubCodec.encode(page, id: "naïve \"id\"")).payload == values)

        let database = try SQLiteDatabase(path: path)
        _ = try database.run("UPDATE user_notifications SET document = ? WHERE id = ?", [Data("{\"id\":".utf8), second.id])
        do {
            _ = try store.changes(user: "alice", after: 0, limit: 10)
            Issue.record("a damaged document was put into a reply")
        } catch let error as HubError {
            #expect(error.code == .internal && error.message.contains(second.id), "\(error.message)")
        }
    }

    @Test("the stream's log holds every change in order, with user, sequence and origin, and keeps the latest when pruned",
          arguments: StoreEngine.available)
    func streamLog(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (a, _) = try Self.post(store, "alice", "a")
        let (b, _) = try Self.post(store, "bob", "b")
        _ = try store.update(a.id, user: "alice", read: .read, action: nil, origin: "phone", now: Self.now)
        _ = try store.delete(b.id, user: "bob", origin: "tablet", now: Self.now)
        _ = try store.expire(now: Self.now.addingTimeInterval(Self.hour))
        let log = try store.streamChanges(after: 0, limit: 100)
        #expect(log == [
            SyncChange(streamSequence: 1, userId: "alice", sequence: 1), SyncChange(streamSequence: 2, userId: "bob", sequence: 1),
            SyncChange(streamSequence: 3, userId: "alice", sequence: 2, origin: "phone"),
            SyncChange(streamSequence: 4, userId: "bob", sequence: 2, origin: "tablet"),
            SyncChange(streamSequence: 5, userId: "alice", sequence: 3),
        ])
        let message = log[2].message
        #expect(message.userId == "alice" && message.sequence == 2 && message.origin == "phone")
        #expect(try store.streamChanges(after: 2, limit: 1).map(\.streamSequence) == [3])
        #expect(try store.streamChanges(after: 5, limit: 100).isEmpty)
        try store.pruneStream(keeping: 2)
        #expect(try store.streamChanges(after: 0, limit: 100).map(\.streamSequence) == [4, 5])
        #expect(try store.streamSequence() == 5)
    }

    @Test("outside a commit group an effect runs at once; only SQLite serves requests in one", arguments: StoreEngine.available)
    func afterCommitOutsideAGroup(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        var ran = false
        try store.afterCommit { ran = true }
        #expect(ran)
        #expect((store.commitGroup != nil) == (engine == .sqlite))
    }

    @Test("on SQLite, a change is published once the group that made it has committed")
    func sqliteGroupCommit() throws {
        let (store, path) = try StoreEngine.sqliteStore()
        let group = try #require(store.commitGroup)
        let observer = try SQLiteDatabase(path: path)
        var published: [[UInt64]] = []
        var queued = false
        let committed = group.run {
            _ = try? Self.post(store, "alice", "a")
            _ = try? Self.post(store, "alice", "b")
            try? store.afterCommit {
                // Another connection reads the log: the group's changes are there.
                published.append(try observer.query("SELECT sequence FROM changes ORDER BY sequence").map { UInt64($0[0].int64 ?? 0) })
            }
            queued = published.isEmpty
        }
        #expect(committed && queued, "the effect waited for the commit")
        #expect(published == [[1, 2]])
    }
}

/// What only a store that several sync processes share must do.
@Suite("User notification store on PostgreSQL, shared", .enabled(if: StoreEngine.server != nil))
struct SharedUserNotificationStoreTests {
    /// Runs `body(0)`, `body(1)`… each on a thread of its own, all at once, and waits for them.
    static func together(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let group = DispatchGroup()
        for index in 0..<count {
            group.enter()
            Thread {
                body(index)
                group.leave()
            }.start()
        }
        group.wait()
    }

    @Test("two stores writing at once number every change without a gap, per user and in the stream; a reader meanwhile never sees a gap; both read the same")
    func sharedSequences() throws {
        let url = try StoreEngine.freshDatabase()
        // Each store is used by one thread only, as each sync process uses its own.
        nonisolated(unsafe) let stores = [
            try PostgresUserNotificationStore(url: url), try PostgresUserNotificationStore(url: url), try PostgresUserNotificationStore(url: url),
        ]
        let users = ["u0", "u1", "u2"]
        let writes = Mutex(0)
        let writersDone = Mutex(0)
        let problems = Mutex<[String]>([])
        Self.together(3) { index in
            let store = stores[index]
            guard index < 2 else {
                // A reader of the log, as a third process publishing it: each read starts where the last ended.
                var cursor: UInt64 = 0
                while true {
                    let finished = writersDone.withLock { $0 } == 2
                    let batch = (try? store.streamChanges(after: cursor, limit: 50)) ?? []
                    if let first = batch.first, first.streamSequence != cursor + 1 || batch.last!.streamSequence != cursor + UInt64(batch.count) {
                        problems.withLock { $0.append("reader after \(cursor): \(batch.map(\.streamSequence))") }
                    }
                    cursor = batch.last?.streamSequence ?? cursor
                    if finished && batch.isEmpty { return }
                }
            }
            defer { writersDone.withLock { $0 += 1 } }
            for step in 0..<150 {
                let user = users[step % 3]
                let now = Date()
                do {
                    var changed = true
                    switch step % 6 {
                    case 4:
                        guard let id = try store.history(user: user, now: now).notifications.first?.id else { continue }
                        changed = try store.update(
                            id, user: user, read: index == 0 ? .read : .unread, action: step % 4 == 0 ? .dismissed : .activated,
                            origin: "s\(index)", now: now).1 != nil
                    case 5:
                        guard let id = try store.history(user: user, now: now).notifications.last?.id else { continue }
                        _ = try store.delete(id, user: user, origin: "s\(index)", now: now)
                    default:
                        // Both stores post the same appNotificationIds: replacements race.
                        _ = try Self.post(store, user, "app\(step % 8)", now)
                    }
                    if changed { writes.withLock { $0 += 1 } }
                } catch let error as HubError where error.code == .notFound {
                    // The other store deleted it meanwhile.
                } catch {
                    problems.withLock { $0.append("store \(index), step \(step): \(error)") }
                }
            }
        }
        #expect(problems.withLock { $0 }.isEmpty)
        let last = try stores[0].streamSequence()
        #expect(last == UInt64(writes.withLock { $0 }), "every change took one number")
        #expect(try stores[1].streamSequence() == last)
        let log = try stores[1].streamChanges(after: 0, limit: 10_000)
        #expect(log.map(\.streamSequence) == Array(1...last), "every change is logged once, in order, without a gap")
        #expect(try stores[0].streamChanges(after: 0, limit: 10_000) == log)
        for user in users {
            let sequence = try stores[0].userSequence(user).sequence
            #expect(log.filter { $0.userId == user }.map(\.sequence) == Array(1...sequence), "\(user)'s sequence has no gap, in stream order")
            let seen = try stores[0].changes(user: user, after: 0, limit: 100)
            #expect(seen == (try stores[1].changes(user: user, after: 0, limit: 100)))
            #expect(seen.cursor == sequence)
            let history = try stores[1].history(user: user, now: Date())
            #expect(history == (try stores[0].history(user: user, now: Date())))
            #expect(Set(history.notifications.map(\.appNotificationId)).count == history.notifications.count, "one per appNotificationId")
        }
    }

    @Test("state changes to one notification through two stores at once are each kept")
    func noLostUpdates() throws {
        let url = try StoreEngine.freshDatabase()
        nonisolated(unsafe) let stores = [try PostgresUserNotificationStore(url: url), try PostgresUserNotificationStore(url: url)]
        let ids = try (0..<40).map { try UserNotificationStoreContractTests.post(stores[0], "alice", "n\($0)").0.id }
        Self.together(2) { index in
            for id in ids {
                // One store marks each read, the other dismisses it.
                _ = try? stores[index].update(
                    id, user: "alice", read: index == 0 ? .read : nil, action: index == 1 ? .dismissed : nil, origin: nil, now: Date())
            }
        }
        let history = try stores[1].history(user: "alice", now: UserNotificationStoreContractTests.now)
        #expect(history.notifications.count == 40)
        #expect(history.notifications.allSatisfy { $0.readState == .read && $0.userActionState == .dismissed })
        #expect(try history.cursor == 120 && stores[0].streamSequence() == 120)
    }

    @Test("two stores expiring at once make one tombstone per notification")
    func sharedExpiry() throws {
        let url = try StoreEngine.freshDatabase()
        nonisolated(unsafe) let stores = [try PostgresUserNotificationStore(url: url), try PostgresUserNotificationStore(url: url)]
        let start = UserNotificationStoreContractTests.now
        for index in 0..<20 {
            try UserNotificationStoreContractTests.post(stores[0], "u\(index % 4)", "n\(index)", lifetime: 10)
        }
        let expired = Mutex<[SyncChange]>([])
        Self.together(2) { index in
            let changes = (try? stores[index].expire(now: start.addingTimeInterval(11))) ?? []
            expired.withLock { $0 += changes }
        }
        let changes = expired.withLock { $0 }.sorted { $0.streamSequence < $1.streamSequence }
        #expect(changes.map(\.streamSequence) == Array(21...40))
        #expect(try stores[1].liveCount() == 0 && stores[0].streamSequence() == 40)
    }

    @Test("the schema is made once, whichever process comes first, and a second process reads and numbers on from what the first wrote")
    func secondProcess() throws {
        let url = try StoreEngine.freshDatabase()
        let first = try PostgresUserNotificationStore(url: url)
        let (notification, _) = try UserNotificationStoreContractTests.post(first, "alice", "shared")
        let second = try PostgresUserNotificationStore(url: url)
        #expect(try second.live(notification.id, user: "alice") == notification)
        #expect(try second.streamSequence() == 1)
        let (_, change) = try UserNotificationStoreContractTests.post(second, "alice", "more")
        #expect(change == SyncChange(streamSequence: 2, userId: "alice", sequence: 2))
        #expect(try first.changes(user: "alice", after: 1, limit: 10).changes.compactMap { $0.notification?.appNotificationId } == ["more"])
    }

    static func post(_ store: PostgresUserNotificationStore, _ user: String, _ app: String, _ now: Date) throws -> (UserNotification, SyncChange) {
        try store.post(UserNotificationStoreContractTests.post(user, app), expiresAt: now.addingTimeInterval(3_600), now: now)
    }

    @Test("the users of a hub are keyed by its prefix: each hub's alice is her own, and a deleted hub's go with it alone",
          arguments: StoreEngine.available)
    func hubsOfUsers(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let news = HubScope(named: "news"), newsy = HubScope(named: "news_y")
        _ = try store.post(PostUserNotification(userId: "alice", appNotificationId: "home", raw: "r"), expiresAt: UserNotificationStoreContractTests.now + UserNotificationStoreContractTests.hour, now: UserNotificationStoreContractTests.now)
        for scope in [news, newsy] {
            let post = PostUserNotification(userId: "alice", appNotificationId: "of-\(scope.qualifier)", raw: "r")
            let (posted, change) = try store.post(post, user: scope.key("alice"), expiresAt: UserNotificationStoreContractTests.now + UserNotificationStoreContractTests.hour, now: UserNotificationStoreContractTests.now)
            #expect(posted.userId == "alice" && change.userId == scope.key("alice"))
        }
        #expect(try store.changes(user: "alice", after: 0, limit: 10).changes.count == 1)
        #expect(try store.changes(user: "news/alice", after: 0, limit: 10).changes.count == 1)
        #expect(try store.purgeHub(news) == 1)
        #expect(try store.changes(user: "news/alice", after: 0, limit: 10).changes.isEmpty)
        #expect(try store.userSequence("news/alice") == (0, 0))
        #expect(try store.changes(user: "news_y/alice", after: 0, limit: 10).changes.count == 1)
        #expect(try store.changes(user: "alice", after: 0, limit: 10).changes.count == 1)
        #expect(try store.purgeHub(HubScope(named: nil)) == 0)
    }
}
