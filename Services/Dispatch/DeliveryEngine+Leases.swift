import Foundation
import Postgres
import Storage

/// The leases dispatchers share the agents by, kept in the store (`LeaseStore`).
extension DeliveryEngine {
    func heartbeat(id: String, endpoint: String, now: Date) throws {
        try run(sql.heartbeat, [id, endpoint, now.timeIntervalSince1970])
    }

    func liveDispatchers(now: Date, within: TimeInterval) throws -> Int {
        try oneRow(sql.liveDispatchers, [now.timeIntervalSince1970 - within]).int("n", of: "dispatchers")
    }

    func renewLeases(owner: String, until: Date) throws -> [Int: UInt64] {
        try dictionary(sql.renewLeases, [until.timeIntervalSince1970, owner], Self.leaseEpoch)
    }

    func claimLeases(owner: String, endpoint: String, count: Int, now: Date, until: Date) throws -> [Int: UInt64] {
        guard count > 0 else { return [:] }
        let claimed = try dictionary(
            sql.claimLeases, [owner, endpoint, until.timeIntervalSince1970, now.timeIntervalSince1970, count], Self.leaseEpoch)
        // Test sends the shards' last owner recorded: their results are kept here from now on.
        if !claimed.isEmpty { ledger.testNotifications = try testNotificationIds() }
        return claimed
    }

    func releaseLeases(owner: String, shards: Set<Int>) throws {
        try run(sql.releaseLeases, [owner, sql.shards(shards)])
    }

    func leaseOwners(now: Date) throws -> [Int: String] {
        try dictionary(sql.leaseOwners, [now.timeIntervalSince1970]) { (try $0.int("shard", of: "leases"), try $0.string("endpoint", of: "leases")) }
    }
}
