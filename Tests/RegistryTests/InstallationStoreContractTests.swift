import Foundation
import HubProtocol
import Storage
import Testing

@testable import NHRegistry

/// The engines the registry's store runs on. PostgreSQL takes part when `NH_TEST_POSTGRES` names a
/// server (`make test` starts a throwaway one); each test gets a database of its own.
enum StoreEngine: String, CaseIterable, CustomStringConvertible, Sendable {
    case sqlite, postgresql

    var description: String { rawValue }

    static var available: [StoreEngine] {
        ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"] == nil ? [.sqlite] : allCases
    }

    func makeStore() throws -> any InstallationStore {
        switch self {
        case .sqlite:
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("nh-registry-\(UUID().uuidString).db").path
            let database = try SQLiteDatabase(path: path)
            try database.migrate(SQLiteInstallationStore.migrations)
            return SQLiteInstallationStore(database: database)
        case .postgresql:
            return try TestPostgres.installationStore()
        }
    }
}

/// What every engine of the registry's store must do alike.
@Suite("Installation store contract")
struct InstallationStoreContractTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func installation(_ id: String, tags: [String] = [], channel: String = "c", expires: Date? = nil, user: String? = nil) -> Installation {
        var installation = Installation(installationId: id, pushChannel: channel, tags: tags, userId: user)
        installation.expirationTime = expires
        installation.templates = ["t": InstallationTemplate(body: #"{"m":"$(m)"}"#, tags: ["x"], headers: ["apns-priority": "5"])]
        return installation
    }

    @Test("an upsert is read back as stored, with its sequence as version, its creation time kept and its tags once each",
          arguments: StoreEngine.available)
    func upsertAndGet(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        #expect(try store.sequence() == 0)
        let (first, sequence) = try store.upsert(Self.installation("a", tags: ["b", "a", "b"], user: "alice"), now: Self.now)
        #expect(sequence == 1 && first.version == 1)
        #expect(first.tags == ["b", "a"])
        #expect(try store.get("a", now: Self.now) == first)
        let later = Self.now.addingTimeInterval(60)
        let (second, next) = try store.upsert(Self.installation("a", tags: ["z"]), now: later)
        #expect(next == 2 && second.createdAt == Self.now && second.lastSeen == later)
        #expect(try store.get("a", now: later)?.tags == ["z"])
        #expect(try store.get("a", now: later)?.userId == nil)
        #expect(try store.get("missing", now: later) == nil)
        #expect(try store.sequence() == 2)
    }

    @Test("installations written together are stored as each written alone: a sequence each in order, creation times kept, tags once, every change logged",
          arguments: StoreEngine.available)
    func writtenTogether(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        _ = try store.upsert(Self.installation("b", tags: ["old"]), now: Self.now)
        let later = Self.now.addingTimeInterval(60)
        try store.upsert(all: [
            Self.installation("a", tags: ["x", "y", "x"], user: "alice"), Self.installation("b", tags: ["new"]),
            Self.installation("c", expires: later.addingTimeInterval(60)),
        ], now: later)
        #expect(try store.sequence() == 4)
        let (a, b, c) = (try store.get("a", now: later), try store.get("b", now: later), try store.get("c", now: later))
        #expect(a?.version == 2 && b?.version == 3 && c?.version == 4)
        #expect(a?.tags == ["x", "y"] && a?.userId == "alice" && a?.createdAt == later && a?.lastSeen == later)
        #expect(b?.tags == ["new"] && b?.createdAt == Self.now)
        #expect(try store.list(tag: "old", pushChannel: nil, after: nil, limit: 10, now: later).installations.isEmpty)
        #expect(try store.list(tag: "y", pushChannel: nil, after: nil, limit: 10, now: later).installations.map(\.installationId) == ["a"])
        let changes = try store.changes(after: 1, limit: 10)
        #expect(changes.map(\.installationId) == ["a", "b", "c"] && changes.map(\.sequence) == [2, 3, 4])
        #expect(try changes[1].installation == b)
        #expect(try store.live(["a", "c", "missing"], now: later.addingTimeInterval(120)).keys.sorted() == ["a"])
        try store.upsert(all: [], now: later)
        #expect(try store.sequence() == 4)
    }

    @Test("deletes bump the sequence only when something was deleted", arguments: StoreEngine.available)
    func deletes(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        _ = try store.upsert(Self.installation("a"), now: Self.now)
        #expect(try store.delete("nobody") == nil)
        #expect(try store.sequence() == 1)
        #expect(try store.delete("a") == 2)
        #expect(try store.get("a", now: Self.now) == nil)
        #expect(try store.delete("a") == nil)
        #expect(try store.count(now: Self.now) == 0)
    }

    @Test("a push endpoint finds the installation that holds it, of any hub, until it is dropped, the installation deleted or expired",
          arguments: StoreEngine.available)
    func endpoints(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        var device = Self.installation("news/dev", channel: "d")
        device.platform = "linux"
        device.endpoints = ["e1": PushEndpoint(), "e2": PushEndpoint(vapid: "k")]
        _ = try store.upsert(device, now: Self.now)
        #expect(try store.installation(holding: "e1", now: Self.now)?.installationId == "news/dev")
        #expect(try store.installation(holding: "e2", now: Self.now)?.endpoints?["e2"]?.vapid == "k")
        #expect(try store.installation(holding: "e3", now: Self.now) == nil)
        // Another installation cannot take an endpoint held: nothing of its write is kept.
        var other = Self.installation("thief", channel: "t")
        other.platform = "linux"
        other.endpoints = ["e1": PushEndpoint()]
        #expect(throws: HubError.self) { try store.upsert(other, now: Self.now) }
        #expect(try store.get("thief", now: Self.now) == nil && store.sequence() == 1)
        // A write without an endpoint drops it; its holder may give it again.
        device.endpoints = ["e2": PushEndpoint()]
        _ = try store.upsert(device, now: Self.now)
        #expect(try store.installation(holding: "e1", now: Self.now) == nil)
        _ = try store.upsert(other, now: Self.now)
        #expect(try store.installation(holding: "e1", now: Self.now)?.installationId == "thief")
        #expect(try store.delete("news/dev") != nil)
        #expect(try store.installation(holding: "e2", now: Self.now) == nil)
        other.expirationTime = Self.now.addingTimeInterval(10)
        _ = try store.upsert(other, now: Self.now)
        #expect(try store.installation(holding: "e1", now: Self.now.addingTimeInterval(11)) == nil)
    }

    @Test("expired installations are not read, listed, counted or in a snapshot, and are purged with a sequence each",
          arguments: StoreEngine.available)
    func expiry(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        _ = try store.upsert(Self.installation("old", tags: ["t"], expires: Self.now.addingTimeInterval(10)), now: Self.now)
        _ = try store.upsert(Self.installation("new", tags: ["t"]), now: Self.now)
        let after = Self.now.addingTimeInterval(11)
        #expect(try store.get("old", now: Self.now) != nil)
        #expect(try store.get("old", now: after) == nil)
        #expect(try store.count(now: after) == 1)
        #expect(try store.list(tag: "t", pushChannel: nil, after: nil, limit: 10, now: after).installations.map(\.installationId) == ["new"])
        #expect(try store.snapshot(now: after).installations.map(\.installationId) == ["new"])
        let purged = try store.purgeExpired(now: after)
        #expect(purged.map(\.0) == ["old"] && purged.map(\.1) == [3])
        #expect(try store.purgeExpired(now: after).isEmpty)
    }

    @Test("lists page in id order, by tag and by channel", arguments: StoreEngine.available)
    func listing(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        for i in 0..<7 {
            _ = try store.upsert(Self.installation("i\(i)", tags: i % 2 == 0 ? ["even"] : ["odd"], channel: "ch\(i % 3)"), now: Self.now)
        }
        var page = try store.list(tag: nil, pushChannel: nil, after: nil, limit: 3, now: Self.now)
        #expect(page.installations.map(\.installationId) == ["i0", "i1", "i2"] && page.next == "i2")
        page = try store.list(tag: nil, pushChannel: nil, after: page.next, limit: 3, now: Self.now)
        #expect(page.installations.map(\.installationId) == ["i3", "i4", "i5"] && page.next == "i5")
        page = try store.list(tag: nil, pushChannel: nil, after: page.next, limit: 3, now: Self.now)
        #expect(page.installations.map(\.installationId) == ["i6"] && page.next == nil)
        #expect(try store.list(tag: "even", pushChannel: nil, after: nil, limit: 10, now: Self.now).installations.map(\.installationId)
                == ["i0", "i2", "i4", "i6"])
        #expect(try store.list(tag: "odd", pushChannel: "ch0", after: nil, limit: 10, now: Self.now).installations.map(\.installationId) == ["i3"])
        #expect(try store.list(tag: "none", pushChannel: nil, after: nil, limit: 10, now: Self.now).installations.isEmpty)
    }

    @Test("a snapshot stands at the store's sequence", arguments: StoreEngine.available)
    func snapshot(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        for id in ["b", "a", "c"] { _ = try store.upsert(Self.installation(id), now: Self.now) }
        _ = try store.delete("c")
        let snapshot = try store.snapshot(now: Self.now)
        let sequence = try store.sequence()
        #expect(snapshot.sequence == 4 && snapshot.sequence == sequence)
        #expect(snapshot.installations.map(\.installationId) == ["a", "b"])
    }

    @Test("the change log holds every change in order, deletions without a document, and keeps the latest when pruned",
          arguments: StoreEngine.available)
    func changeLog(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        let (a, _) = try store.upsert(Self.installation("a"), now: Self.now)
        _ = try store.upsert(Self.installation("b"), now: Self.now)
        _ = try store.delete("a")
        _ = try store.upsert(Self.installation("c", expires: Self.now.addingTimeInterval(1)), now: Self.now)
        _ = try store.purgeExpired(now: Self.now.addingTimeInterval(2))
        let changes = try store.changes(after: 0, limit: 100)
        #expect(changes.map(\.sequence) == [1, 2, 3, 4, 5])
        #expect(changes.map(\.installationId) == ["a", "b", "a", "c", "c"])
        #expect(try changes[0].installation == a)
        #expect(try changes[2].installation == nil && changes[4].installation == nil)
        // The stream's message is written around the stored document, exactly as the codec writes the message.
        for change in changes {
            let message = InstallationChanged(
                change: change.document == nil ? .deleted : .upserted, installationId: change.installationId, installation: try change.installation)
            #expect(change.body == HubCodec.encode(message, id: String(change.sequence)))
        }
        #expect(try store.changes(after: 3, limit: 1).map(\.sequence) == [4])
        try store.pruneChanges(keeping: 2)
        #expect(try store.changes(after: 0, limit: 100).map(\.sequence) == [4, 5])
    }
}

/// What only a store that several registry processes share must do.
@Suite("Installation store on PostgreSQL, shared", .enabled(if: ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"] != nil))
struct SharedInstallationStoreTests {
    @Test("two stores writing at once number their changes 1…N without a gap, and both read every change in order")
    func sharedSequence() throws {
        let url = try TestPostgres.freshDatabase()
        // Each store is used by one thread only, as each registry process uses its own.
        nonisolated(unsafe) let stores = [try PostgresInstallationStore(url: url), try PostgresInstallationStore(url: url)]
        let perStore = 200
        DispatchQueue.concurrentPerform(iterations: 2) { index in
            for i in 0..<perStore {
                let id = "s\(index)-\(i % 20)"
                if i % 7 == 6 {
                    _ = try? stores[index].delete(id)
                } else {
                    _ = try? stores[index].upsert(InstallationStoreContractTests.installation(id, tags: ["t\(i % 3)"]), now: Date())
                }
            }
        }
        let last = try stores[0].sequence()
        #expect(try stores[1].sequence() == last)
        for store in stores {
            let changes = try store.changes(after: 0, limit: 10_000)
            #expect(changes.map(\.sequence) == Array(1...last), "every change is logged once, in order, without a gap")
        }
        // What each store reads is what the log says happened last to each id.
        var latest: [String: Bool] = [:]
        for change in try stores[0].changes(after: 0, limit: 10_000) { latest[change.installationId] = change.document != nil }
        let live = Set(try stores[1].snapshot(now: Date()).installations.map(\.installationId))
        #expect(live == Set(latest.filter(\.value).keys))
    }

    @Test("the schema is made once, whichever process comes first, and a second process reads what the first wrote")
    func secondProcess() throws {
        let url = try TestPostgres.freshDatabase()
        let first = try PostgresInstallationStore(url: url)
        _ = try first.upsert(InstallationStoreContractTests.installation("shared", tags: ["a"]), now: Date())
        let second = try PostgresInstallationStore(url: url)
        #expect(try second.get("shared", now: Date())?.tags == ["a"])
        #expect(try second.sequence() == 1)
    }
}
