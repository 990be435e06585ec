import Foundation
import HubProtocol
import Postgres
import Storage
import Testing

@testable import NHSync

/// The sync store on a server that failed over to a replica that was behind: the changes the
/// replica had not received are gone, later changes are numbered above every number handed out
/// before, and a device whose cursor names a lost change is told so (`history_rewound`), while one
/// whose cursor the new history shares goes on. The failover is played on one database: the lost
/// change's rows are taken back as the replica never had them, and the store is told its history
/// began on another timeline than the server's, as a promoted replica's is.
@Suite("Sync store after a failover that lost changes", .enabled(if: StoreEngine.server != nil))
struct RewoundHistoryTests {
    typealias Contract = UserNotificationStoreContractTests

    @Test("posts after the failover reach devices at every cursor, a device that saw a lost post syncs in full, and the stream goes on above")
    func rewound() throws {
        let url = try StoreEngine.freshDatabase()
        let store = try PostgresUserNotificationStore(url: url)
        defer { store.connection.close() }
        let (a, _) = try Contract.post(store, "alice", "a")
        let (b, _) = try Contract.post(store, "alice", "b")
        let (lost, lostChange) = try Contract.post(store, "alice", "lost")
        try Contract.post(store, "bob", "x")
        // Carol's first post is the one the replica never received: her device's copy is all lost.
        let (carolLost, carolChange) = try Contract.post(store, "carol", "lost")
        let carolDevice = try store.changes(user: "carol", after: 0, limit: 100).cursor
        #expect(carolDevice == 1)
        #expect(try store.userSequence("alice").sequence == 3 && store.streamSequence() == 5)
        // Device 1 saw the post that the replica never received; device 2 stopped before it.
        let device1 = try store.changes(user: "alice", after: 0, limit: 100).cursor
        #expect(device1 == 3)

        let admin = try PostgresConnection(url: url)
        defer { admin.close() }
        try admin.execute("""
            DELETE FROM sync.user_notifications WHERE id IN ('\(lost.id)', '\(carolLost.id)');
            UPDATE sync.users SET sequence = 2 WHERE user_id = 'alice';
            DELETE FROM sync.users WHERE user_id = 'carol';
            DELETE FROM sync.changes WHERE sequence IN (\(lostChange.streamSequence), \(carolChange.streamSequence));
            UPDATE sync.stream SET sequence = 3;
            UPDATE store_history.histories SET timeline = timeline + 1000;
            """)
        let pid = try #require(try store.connection.queryOne("SELECT pg_backend_pid()")?[0].int)
        _ = try admin.queryOne("SELECT pg_terminate_backend($1)", [pid])
        _ = try? store.connection.queryOne("SELECT 1")
        #expect(store.connection.reconnectIfNeeded())
        guard case .rewound(_, let history)? = store.takeSessionEvents().first else {
            Issue.record("the new session did not report a rewound history")
            return
        }
        #expect(history.epoch == 1)
        let base = history.base
        #expect(try store.streamSequence() == base, "the stream's sequence moved above every number of the old history")

        // A post after the failover takes a number above the old history's, so no cursor passes it.
        let (c, change) = try Contract.post(store, "alice", "c")
        #expect(change.sequence == base + 1 && change.streamSequence == base + 1)
        #expect(Contract.code { _ = try store.changes(user: "alice", after: device1, limit: 100) } == .historyRewound)
        #expect(try store.changes(user: "alice", after: 2, limit: 100).changes.map(\.id) == [c.id])
        #expect(try store.changes(user: "alice", after: 0, limit: 100).changes.map(\.id) == [a.id, b.id, c.id])
        // A full sync: the history, and what follows its cursor.
        let full = try store.history(user: "alice", now: Contract.now)
        #expect(full.notifications.map(\.id) == [a.id, b.id, c.id] && full.cursor == base + 1)
        #expect(try store.changes(user: "alice", after: full.cursor, limit: 100).changes.isEmpty)
        // Bob had no change since: his cursor still names what it named; one past it does not.
        #expect(try store.changes(user: "bob", after: 1, limit: 100).changes.isEmpty)
        #expect(Contract.code { _ = try store.changes(user: "bob", after: 2, limit: 100) } == .historyRewound)
        let (y, _) = try Contract.post(store, "bob", "y")
        #expect(try store.changes(user: "bob", after: 1, limit: 100).changes.map(\.id) == [y.id])
        // Carol is new to this history: her device's cursor names only what was lost, and she syncs in full.
        #expect(Contract.code { _ = try store.changes(user: "carol", after: carolDevice, limit: 100) } == .historyRewound)
        let (carolNew, _) = try Contract.post(store, "carol", "after")
        #expect(Contract.code { _ = try store.changes(user: "carol", after: carolDevice, limit: 100) } == .historyRewound)
        #expect(try store.changes(user: "carol", after: 0, limit: 100).changes.map(\.id) == [carolNew.id])
        // The change stream goes on above the old history's numbers, so a reader at 5 misses nothing.
        #expect(try store.streamChanges(after: 5, limit: 10).map(\.userId) == ["alice", "bob", "carol"])
    }
}
