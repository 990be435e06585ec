import DispatchCore
import Foundation
import Storage
import Testing

@testable import NHDispatch

/// What only the SQLite store does: it upgrades files written before shards.
@Suite("Delivery store on SQLite")
struct SQLiteDeliveryStoreTests {
    @Test("deliveries stored before shards get theirs when the store opens, once")
    func upgrade() throws {
        let database = try StoreEngine.sqliteDatabase(SQLiteDeliveryStore.migrations.filter { $0.version <= 6 })
        let (a, b) = (Fixture.installation(inShard: 11), Fixture.installation(inShard: 12))
        for installation in [a, b] {
            try database.run(
                "INSERT INTO deliveries (delivery_id, notification_id, installation_id, payload, expires_at) VALUES (?, 'n', ?, 'old', ?)",
                ["n/\(installation)", installation, Fixture.now.addingTimeInterval(60).timeIntervalSince1970])
        }
        try database.migrate(SQLiteDeliveryStore.migrations)
        let store = try SQLiteDeliveryStore(database: database)
        #expect(try store.backlog(now: Fixture.now, shards: [11]) == [a])
        #expect(try store.backlog(now: Fixture.now, shards: [12, 13]) == [b])
        #expect(try store.pending(for: a, now: Fixture.now).map(\.payload) == ["old"])
        #expect(try database.queryOne("SELECT count(*) FROM sqlite_master WHERE name = 'deliveries_unsharded'")?[0].int == 0)
        _ = try SQLiteDeliveryStore(database: database)
        #expect(try database.queryOne("SELECT count(*) FROM deliveries WHERE shard IS NULL")?[0].int == 0)
    }
}
