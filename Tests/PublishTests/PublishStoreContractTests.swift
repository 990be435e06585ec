import Foundation
import HubProtocol
import Postgres
import Storage
import Synchronization
import Testing

@testable import NHPublish

/// The engines the publish service's store runs on: SQLite always, PostgreSQL when
/// `NH_TEST_POSTGRES` names a server; each test gets a database of its own.
enum PublishEngine: String, CaseIterable, CustomStringConvertible, Sendable {
    case sqlite, postgresql

    var description: String { rawValue }

    static var available: [PublishEngine] { TestPostgres.isAvailable ? allCases : [.sqlite] }

    func makeStores() throws -> (any PublishStore, any RichStore) {
        switch self {
        case .sqlite:
            let base = FileManager.default.temporaryDirectory.appendingPathComponent("nh-publish-\(UUID().uuidString)")
            let database = try SQLiteDatabase(path: base.path + ".db")
            try database.migrate(PublishSchema.migrations)
            return (SQLitePublishStore(database: database), try SQLiteRichStore(database: database, directory: base))
        case .postgresql:
            let store = try PostgresPublishStore(url: try TestPostgres.freshDatabase())
            return (store, PostgresRichStore(connection: store.connection))
        }
    }
}

/// What every engine of the publish service's store must do alike.
@Suite("Publish store contract")
struct PublishStoreContractTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func send(_ body: String, key: String? = nil, at: Date? = nil) -> SendNotification {
        SendNotification(idempotencyKey: key, format: .native, body: body, tagExpression: "news", scheduledAt: at)
    }

    static func code(_ body: () throws -> Void) -> ErrorCode? {
        do {
            try body()
            return nil
        } catch {
            return (error as? HubError)?.code
        }
    }

    @Test("accepts are numbered 1, 2, 3 in order, found by id, and the latest sequence follows", arguments: PublishEngine.available)
    func acceptAndFind(engine: PublishEngine) throws {
        let (store, _) = try engine.makeStores()
        #expect(try store.latestSequence() == 0)
        var accepted: [AcceptedNotification] = []
        for body in ["one", "two", "three"] {
            let (notification, isNew) = try store.accept(Self.send(body), timeToLive: 60, now: Self.now)
            #expect(isNew)
            accepted.append(notification)
        }
        #expect(accepted.map(\.sequence) == [1, 2, 3])
        #expect(Set(accepted.map(\.notificationId)).count == 3)
        #expect(accepted[0].expiresAt == Self.now.addingTimeInterval(60) && accepted[0].enqueuedAt == Self.now)
        #expect(try store.latestSequence() == 3)
        #expect(try store.find(accepted[1].notificationId) == accepted[1])
        #expect(try store.find("missing") == nil)
    }

    @Test("a commit group numbers its sends in the order they came, with a key or without, and the next group follows", arguments: PublishEngine.available)
    func group(engine: PublishEngine) throws {
        let (store, _) = try engine.makeStores()
        var ids: [String] = []
        var repeated: AcceptedNotification?
        try store.group {
            for (body, key) in [("a", nil), ("b", "key-b"), ("c", nil), ("d", nil)] {
                ids.append(try! store.accept(Self.send(body, key: key), timeToLive: 60, now: Self.now).0.notificationId)
            }
            repeated = try! store.accept(Self.send("b again", key: "key-b"), timeToLive: 60, now: Self.now).0
        }
        try store.group {
            ids.append(try! store.accept(Self.send("e"), timeToLive: 90, now: Self.now).0.notificationId)
        }
        let stored = try store.pending(after: 0, limit: 10)
        #expect(stored.map(\.send.body) == ["a", "b", "c", "d", "e"])
        #expect(stored.map(\.sequence) == [1, 2, 3, 4, 5])
        #expect(stored.map(\.notificationId) == ids)
        #expect(repeated?.notificationId == ids[1] && repeated?.send.body == "b")
        #expect(stored[4].expiresAt == Self.now.addingTimeInterval(90) && stored[4].enqueuedAt == Self.now)
        #expect(try store.latestSequence() == 5)
        #expect(try store.find(ids[2])?.send.body == "c")
        // Outside a group, each send commits alone and is numbered at once.
        #expect(try store.accept(Self.send("f"), timeToLive: 60, now: Self.now).0.sequence == 6)
    }

    @Test("a repeated idempotency key returns the first send, and takes no sequence", arguments: PublishEngine.available)
    func idempotency(engine: PublishEngine) throws {
        let (store, _) = try engine.makeStores()
        let (first, isNew) = try store.accept(Self.send("first", key: "order-1"), timeToLive: 60, now: Self.now)
        let (again, againIsNew) = try store.accept(Self.send("second", key: "order-1"), timeToLive: 60, now: Self.now.addingTimeInterval(5))
        #expect(isNew && !againIsNew)
        #expect(again == first && again.send.body == "first")
        let (other, _) = try store.accept(Self.send("other", key: "order-2"), timeToLive: 60, now: Self.now)
        #expect(other.sequence == 2)
        #expect(try store.pending(after: 0, limit: 10).map(\.send.body) == ["first", "other"])
    }

    @Test("pending returns what follows the cursor, in order, at most the limit; nothing past the last", arguments: PublishEngine.available)
    func pending(engine: PublishEngine) throws {
        let (store, _) = try engine.makeStores()
        for i in 1...5 { _ = try store.accept(Self.send("n\(i)"), timeToLive: 60, now: Self.now) }
        #expect(try store.pending(after: 0, limit: 2).map(\.sequence) == [1, 2])
        let rest = try store.pending(after: 2, limit: 10)
        #expect(rest.map(\.sequence) == [3, 4, 5] && rest.map(\.send.body) == ["n3", "n4", "n5"])
        #expect(try store.pending(after: 5, limit: 10).isEmpty)
        // A cursor past any sequence, even past the largest the store's integers hold, reads nothing.
        #expect(try store.pending(after: UInt64(Int64.max) + 1, limit: 10).isEmpty)
        #expect(try store.pending(after: .max, limit: 10).isEmpty)
    }

    @Test("the stream's bodies, made around the stored sends, read as the notifications pending returns", arguments: PublishEngine.available)
    func streamBodies(engine: PublishEngine) throws {
        let (store, _) = try engine.makeStores()
        var send = Self.send("quote \" backslash \\ and ünïcode")
        send.properties = ["messageParam": "line\nbreak", "other": "x"]
        send.tagExpression = "World && !Sports"
        _ = try store.accept(send, timeToLive: 60, now: Self.now)
        _ = try store.accept(Self.send("second"), timeToLive: 90, now: Self.now.addingTimeInterval(1.5))
        let pending = try store.pending(after: 0, limit: 10)
        let streamed = try store.stream(after: 0, limit: 10)
        #expect(streamed.map(\.sequence) == pending.map(\.sequence))
        #expect(streamed.map { NotificationStream.notification(in: $0.body, sequence: $0.sequence) } == pending.map { Optional($0) })
        #expect(try store.stream(after: 1, limit: 10).map(\.sequence) == [2])
    }

    @Test("a scheduled send waits, fires once when due under the id its sender was told, and cannot be canceled then",
          arguments: PublishEngine.available)
    func scheduleAndFire(engine: PublishEngine) throws {
        let (store, _) = try engine.makeStores()
        let fireAt = Self.now.addingTimeInterval(60)
        let id = try store.schedule(Self.send("later", key: "s-1", at: fireAt), fireAt: fireAt, now: Self.now)
        #expect(try store.schedule(Self.send("again", key: "s-1", at: fireAt), fireAt: fireAt, now: Self.now) == id)
        #expect(try store.scheduledState(id) == ScheduledState(state: .scheduled, enqueuedAt: Self.now))
        #expect(try store.find(id) == nil)
        let ttl = { (_: SendNotification) in 30 }
        #expect(try store.fireDue(now: fireAt.addingTimeInterval(-1), timeToLive: ttl).count == 0)
        let fired = try store.fireDue(now: fireAt, timeToLive: ttl).fired
        #expect(fired.map(\.notificationId) == [id] && fired.map(\.sequence) == [1])
        #expect(fired.first?.send.body == "later" && fired.first?.send.scheduledAt == nil && fired.first?.send.idempotencyKey == nil)
        #expect(fired.first?.expiresAt == fireAt.addingTimeInterval(30))
        #expect(try store.fireDue(now: fireAt.addingTimeInterval(60), timeToLive: ttl).count == 0)
        #expect(try store.scheduledState(id) == nil)
        #expect(try store.find(id) == fired.first)
        #expect(Self.code { try store.cancel(id) } == .conflict)
    }

    @Test("a scheduled send that no longer validates when due is abandoned with why, never accepted, and not tried again",
          arguments: PublishEngine.available)
    func abandonInvalid(engine: PublishEngine) throws {
        let (store, _) = try engine.makeStores()
        let fireAt = Self.now.addingTimeInterval(60)
        let refused = try store.schedule(Self.send("refused", at: fireAt), fireAt: fireAt, now: Self.now)
        let kept = try store.schedule(Self.send("kept", at: fireAt.addingTimeInterval(1)), fireAt: fireAt.addingTimeInterval(1), now: Self.now)
        let rule = HubError(.invalidArgument, "the body may not say refused")
        let round = try store.fireDue(now: fireAt.addingTimeInterval(1)) { send throws(HubError) in
            guard send.body != "refused" else { throw rule }
            return 30
        }
        #expect(round.abandoned == [AbandonedSend(notificationId: refused, reason: rule.description)])
        #expect(round.fired.map(\.notificationId) == [kept])
        #expect(try store.scheduledState(refused) == ScheduledState(state: .abandoned, enqueuedAt: Self.now, reason: rule.description))
        #expect(try store.find(refused) == nil)
        #expect(try store.pending(after: 0, limit: 10).map(\.notificationId) == [kept])
        #expect(try store.fireDue(now: fireAt.addingTimeInterval(60), timeToLive: { _ in 30 }).count == 0)
        #expect(Self.code { try store.cancel(refused) } == .conflict)
    }

    @Test("a canceled send never fires; an unknown one is not found, and a second cancel conflicts", arguments: PublishEngine.available)
    func cancel(engine: PublishEngine) throws {
        let (store, _) = try engine.makeStores()
        let fireAt = Self.now.addingTimeInterval(60)
        let canceled = try store.schedule(Self.send("never", at: fireAt), fireAt: fireAt, now: Self.now)
        let kept = try store.schedule(Self.send("kept", at: fireAt), fireAt: fireAt, now: Self.now)
        #expect(canceled != kept)
        try store.cancel(canceled)
        #expect(try store.scheduledState(canceled)?.state == .canceled)
        #expect(Self.code { try store.cancel(canceled) } == .conflict)
        #expect(Self.code { try store.cancel("nobody") } == .notFound)
        #expect(try store.fireDue(now: fireAt, timeToLive: { _ in 30 }).fired.map(\.notificationId) == [kept])
    }

    @Test("purge forgets notifications that expired before the cut-off", arguments: PublishEngine.available)
    func purge(engine: PublishEngine) throws {
        let (store, _) = try engine.makeStores()
        let (short, _) = try store.accept(Self.send("short", key: "p-1"), timeToLive: 10, now: Self.now)
        let (long, _) = try store.accept(Self.send("long"), timeToLive: 1_000, now: Self.now)
        #expect(try store.purge(before: Self.now.addingTimeInterval(10)) == 0)
        #expect(try store.purge(before: Self.now.addingTimeInterval(100)) == 1)
        #expect(try store.find(short.notificationId) == nil)
        #expect(try store.pending(after: 0, limit: 10) == [long])
    }

    @Test("a rich payload is stored once by content, read back until the longest expiry, then purged",
          arguments: PublishEngine.available)
    func richPayloads(engine: PublishEngine) throws {
        let (_, rich) = try engine.makeStores()
        let bytes = Data((0..<70_000).map { UInt8(truncatingIfNeeded: $0 * 7) })
        let id = try rich.store(bytes, contentType: "image/png", expiresAt: Self.now.addingTimeInterval(60))
        #expect(id.count == 64)
        #expect(try rich.store(bytes, contentType: "image/png", expiresAt: Self.now.addingTimeInterval(120)) == id)
        #expect(try rich.store(Data([0, 1, 0]), contentType: "application/octet-stream", expiresAt: Self.now.addingTimeInterval(30)) != id)
        #expect(try rich.count == 2)
        let payload = try rich.fetch(id, now: Self.now.addingTimeInterval(90))
        #expect(payload?.data == bytes && payload?.contentType == "image/png" && payload?.richId == id)
        #expect(payload?.expiresAt == Self.now.addingTimeInterval(120))
        #expect(try rich.fetch("0" + id.dropFirst(), now: Self.now) == nil)
        #expect(try rich.purge(now: Self.now.addingTimeInterval(60)) == 1)
        #expect(try rich.fetch(id, now: Self.now.addingTimeInterval(120)) == nil)
        #expect(try rich.purge(now: Self.now.addingTimeInterval(120)) == 1)
        #expect(try rich.count == 0)
    }
}

/// What only a store that several publish processes share must do.
@Suite("Publish store on PostgreSQL, shared", .enabled(if: TestPostgres.isAvailable))
struct SharedPublishStoreTests {
    @Test("two stores accepting at once number their sends 1…N without a gap, keep each idempotency key once, and a reader pulling by cursor meanwhile skips none")
    func sharedSequence() throws {
        let url = try TestPostgres.freshDatabase()
        // Each store is used by one thread only, as each publish process uses its own.
        nonisolated(unsafe) let stores = [try PostgresPublishStore(url: url), try PostgresPublishStore(url: url), try PostgresPublishStore(url: url)]
        let perStore = 200
        let expected = 2 * perStore - perStore / 10
        let pulled = Mutex<[UInt64]>([])
        DispatchQueue.concurrentPerform(iterations: 3) { index in
            guard index < 2 else {
                // A dispatcher: pulls after its cursor while the others accept.
                var cursor: UInt64 = 0
                let deadline = Date().addingTimeInterval(60)
                while cursor < UInt64(expected), Date() < deadline {
                    let batch = (try? stores[2].pending(after: cursor, limit: 7)) ?? []
                    pulled.withLock { $0 += batch.map(\.sequence) }
                    cursor = batch.last?.sequence ?? cursor
                }
                return
            }
            for i in 0..<perStore {
                // Every tenth send is sent through both stores with the same key.
                let key = i % 10 == 0 ? "shared-\(i)" : nil
                _ = try? stores[index].accept(
                    PublishStoreContractTests.send("s\(index)-\(i)", key: key), timeToLive: 600, now: Date())
            }
        }
        #expect(pulled.withLock { $0 } == Array(1...UInt64(expected)), "the reader saw every sequence once, in order")
        #expect(try stores[0].latestSequence() == UInt64(expected) && stores[1].latestSequence() == UInt64(expected))
        let all = try stores[1].pending(after: 0, limit: 1_000)
        #expect(all.map(\.sequence) == Array(1...UInt64(expected)))
        let keys = all.compactMap(\.send.idempotencyKey)
        #expect(keys.count == perStore / 10 && Set(keys).count == keys.count)
    }

    @Test("scheduled sends fired by two stores racing fire once each, and a cancel racing a fire either wins or conflicts")
    func fireOnce() throws {
        let url = try TestPostgres.freshDatabase()
        nonisolated(unsafe) let stores = [try PostgresPublishStore(url: url), try PostgresPublishStore(url: url)]
        let now = Date()
        let ids = try (0..<60).map { i in
            try stores[i % 2].schedule(PublishStoreContractTests.send("at \(i)", at: now), fireAt: now, now: now)
        }
        let fired = Mutex<[[String]]>([[], []])
        let canceled = Mutex<Set<String>>([])
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            for round in 0..<20 {
                if index == 1, round < 10, (try? stores[1].cancel(ids[round * 6])) != nil {
                    _ = canceled.withLock { $0.insert(ids[round * 6]) }
                }
                let batch = (try? stores[index].fireDue(now: now.addingTimeInterval(1), timeToLive: { _ in 60 }).fired) ?? []
                fired.withLock { $0[index] += batch.map(\.notificationId) }
            }
        }
        let (first, second) = fired.withLock { ($0[0], $0[1]) }
        let canceledIds = canceled.withLock { $0 }
        #expect(Set(first).isDisjoint(with: second), "no send fired in both")
        #expect(Set(first + second).count == first.count + second.count)
        #expect(Set(first + second) == Set(ids).subtracting(canceledIds))
        let accepted = try stores[0].pending(after: 0, limit: 1_000)
        #expect(accepted.map(\.sequence) == Array(1...UInt64(60 - canceledIds.count)))
        #expect(Set(accepted.map(\.notificationId)) == Set(first + second))
    }

    @Test("the schema is made once, whichever process comes first, and a second process reads what the first wrote")
    func secondProcess() throws {
        let url = try TestPostgres.freshDatabase()
        let first = try PostgresPublishStore(url: url)
        let (accepted, _) = try first.accept(PublishStoreContractTests.send("shared"), timeToLive: 60, now: PublishStoreContractTests.now)
        let richId = try PostgresRichStore(connection: first.connection).store(Data("bytes".utf8), contentType: "text/plain", expiresAt: Date().addingTimeInterval(60))
        let second = try PostgresPublishStore(url: url)
        #expect(try second.find(accepted.notificationId) == accepted)
        #expect(try second.latestSequence() == 1)
        #expect(try PostgresRichStore(connection: second.connection).fetch(richId, now: Date())?.data == Data("bytes".utf8))
    }

    @Test("an accept commits a notice on the channel, which another session's listener reads")
    func notifies() throws {
        let url = try TestPostgres.freshDatabase()
        let store = try PostgresPublishStore(url: url)
        let listener = try PostgresConnection(url: url)
        defer { listener.close() }
        try listener.listen(PostgresPublishStore.notifyChannel)
        #expect(!listener.pollNotifications())
        _ = try store.accept(PublishStoreContractTests.send("told"), timeToLive: 60, now: Date())
        let deadline = Date().addingTimeInterval(5)
        var told = false
        while !told, Date() < deadline {
            told = listener.pollNotifications()
            if !told { Thread.sleep(forTimeInterval: 0.02) }
        }
        #expect(told)
    }
}
