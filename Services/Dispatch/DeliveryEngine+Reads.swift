import DispatchCore
import Foundation
import Synchronization
import HubProtocol
import Postgres
import Push
import Storage

/// What the store answers: deliveries waiting, outcomes, test results and totals.
extension DeliveryEngine {
    func testNotificationIds() throws -> Set<String> {
        Set(try query(sql.testNotifications, []).map { try $0.string("notification_id", of: "test_results") })
    }

    func testResults(_ notificationId: String) throws -> TestResults? {
        let table = "test_results"
        let results = try query(sql.testResults, [notificationId]).map {
            TestResult(installationId: try $0.string("installation_id", of: table), platform: try $0.string("platform", of: table),
                       pushChannel: try $0.string("push_channel", of: table), outcome: try $0.optionalString("outcome", of: table),
                       success: try $0.bool("success", of: table))
        }
        guard !results.isEmpty || ledger.testNotifications.contains(notificationId) else { return nil }
        return TestResults(results: results)
    }

    func backlog(now: Date, shards: Set<Int>?) throws -> Set<String> {
        try writeHeld()
        let rows = if let shards {
            try query(sql.backlogOfShards, [now.timeIntervalSince1970, sql.shards(shards)])
        } else {
            try query(sql.backlog, [now.timeIntervalSince1970])
        }
        return Set(try rows.map { try $0.string("installation_id", of: "deliveries") })
    }

    func unacknowledged(for installationId: String, now: Date, limit: Int) throws -> (deliveries: [AgentDelivery], sentBefore: Set<String>) {
        try writeHeld()
        var sentBefore: Set<String> = []
        let table = "deliveries"
        let deliveries = try query(sql.pending, [installationId, now.timeIntervalSince1970, limit]).map { row in
            let id = try row.string("delivery_id", of: table)
            if try row.bool("sent", of: table) { sentBefore.insert(id) }
            return AgentDelivery(
                deliveryId: id, notificationId: try row.string("notification_id", of: table), installationId: installationId,
                template: try row.optionalString("template", of: table), payload: try row.string("body", of: table),
                expiresAt: try row.date("expires_at", of: table),
                rich: try row.optionalData("rich", of: table).map { try ledger.decoder.decode(RichReference.self, from: $0) })
        }
        return (deliveries, sentBefore)
    }

    func pendingPush(now: Date, limit: Int, shards: Set<Int>?) throws -> [PushMessage] {
        let rows = if let shards {
            try query(sql.pendingPushOfShards, [now.timeIntervalSince1970, limit, sql.shards(shards)])
        } else {
            try query(sql.pendingPush, [now.timeIntervalSince1970, limit])
        }
        // A platform this build does not know is left out.
        let table = "deliveries"
        return try rows.compactMap { row in
            guard let platform = Platform(name: try row.string("platform", of: table)) else { return nil }
            return PushMessage(
                deliveryId: try row.string("delivery_id", of: table), notificationId: try row.string("notification_id", of: table),
                installationId: try row.string("installation_id", of: table), platform: platform,
                pushChannel: try row.string("push_channel", of: table), payload: try row.string("body", of: table),
                headers: try row.optionalString("headers", of: table).map { try ledger.decoder.decode([String: String].self, from: Data($0.utf8)) }
                    ?? [:],
                expiresAt: try row.date("expires_at", of: table))
        }
    }

    func totals() throws -> [String: String] {
        let row = try oneRow(sql.outcomeTotals)
        var totals = ["pendingDeliveries": String(try oneRow(sql.openDeliveries).int("n", of: "deliveries") + ledger.unwritten.count)]
        for name in ["notifications", "targets", "delivered", "acknowledged", "expired", "failed"] {
            totals[name + "Total"] = String(try row.int(name, of: "outcomes"))
        }
        totals["acknowledgedUnwrittenTotal"] = String(ledger.acknowledgedUnwritten)
        return totals
    }

    func outcome(_ notificationId: String, in scope: HubScope?, now: Date) throws -> NotificationOutcome? {
        guard let row = try one(sql.outcome, [notificationId]) else { return nil }
        let table = "outcomes"
        if let scope, HubScope(named: try row.optionalString("hub", of: table)) != scope { return nil }
        var outcome = NotificationOutcome(
            notificationId: notificationId, state: try row.string("state", of: table, as: NotificationState.self),
            enqueuedAt: try row.date("enqueued_at", of: table), startedAt: try row.optionalDate("started_at", of: table),
            endedAt: try row.optionalDate("ended_at", of: table), targets: try row.int("targets", of: table),
            delivered: try row.int("delivered", of: table), acknowledged: try row.int("acknowledged", of: table),
            expired: try row.int("expired", of: table), failed: try row.int("failed", of: table))
        // A push service that has not answered yet (its delivery waits for a retry): not done.
        if outcome.state == .completed, try oneRow(sql.waitingPush, [notificationId, now.timeIntervalSince1970]).int("n", of: "deliveries") > 0 {
            outcome.state = .processing
            outcome.endedAt = nil
        }
        var platforms: [String: [String: Int]] = [:]
        for row in try query(sql.platformOutcomes, [notificationId]) {
            let table = "platform_outcomes"
            platforms[try row.string("platform", of: table), default: [:]][try row.string("outcome", of: table)] = try row.int("count", of: table)
        }
        // The other platforms' counts are kept as their push services answer; what the aggregate
        // counts say beyond them is the Linux agents'.
        if let linux = platforms[Platform.linux.rawValue] {
            let elsewhere = platforms.filter { $0.key != Platform.linux.rawValue }.values
            func sum(_ include: (String) -> Bool) -> Int { elsewhere.reduce(0) { $0 + $1.filter { include($0.key) }.values.reduce(0, +) } }
            let success = sum { $0 == "Success" }
            let expired = sum { $0 == "Expired" }
            let failed = sum { !["Targets", "Success", "Expired"].contains($0) }
            platforms[Platform.linux.rawValue] = [
                "Targets": linux["Targets"] ?? 0, "Delivered": max(outcome.delivered - success, 0), "Success": max(outcome.acknowledged - success, 0),
                "Expired": max(outcome.expired - expired, 0), "Failed": max(outcome.failed - failed, 0),
            ]
        }
        outcome.platforms = platforms.isEmpty ? nil : platforms
        return outcome
    }
}
