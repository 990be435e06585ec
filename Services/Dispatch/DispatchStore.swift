import Foundation
import HubProtocol
import DispatchCore
import Push
import Storage

final class DispatchStore {
    let database: SQLiteDatabase
    private let encoder = HubCodec.makeEncoder()
    private let decoder = HubCodec.makeDecoder()

    /// Test sends whose targets' results are still kept; every other notification's acks skip them.
    private var testNotifications: Set<String> = []
    static let testResultsKept = 10
    static let successText = "The Notification was successfully sent to the Push Notification System"

    init(database: SQLiteDatabase) {
        self.database = database
        testNotifications = Set((try? database.query("SELECT DISTINCT notification_id FROM test_results"))?.compactMap { $0[0].string } ?? [])
    }

    /// Records what became of one of a test send's deliveries, if it is one of those kept.
    private func testOutcome(_ notificationId: String, deliveryId: String, _ outcome: String, success: Bool) throws {
        guard testNotifications.contains(notificationId) else { return }
        try database.run(
            "UPDATE test_results SET outcome = ?, success = ? WHERE delivery_id = ? AND outcome IS NULL",
            [outcome, success ? 1 : 0, deliveryId])
    }

    /// What became of each of a test send's first targets; nil when it is not a test send the dispatcher has.
    func testResults(_ notificationId: String) throws -> TestResults? {
        guard testNotifications.contains(notificationId) else { return nil }
        let rows = try database.query(
            "SELECT installation_id, platform, push_channel, outcome, success FROM test_results WHERE notification_id = ? ORDER BY delivery_id",
            [notificationId])
        return TestResults(results: rows.map {
            TestResult(installationId: $0[0].string ?? "", platform: $0[1].string ?? "", pushChannel: $0[2].string ?? "",
                       outcome: $0[3].string, success: ($0[4].int ?? 0) != 0)
        })
    }

    func cursor() throws -> UInt64 {
        UInt64(try database.queryOne("SELECT after FROM cursor WHERE id = 1")?[0].int64 ?? 0)
    }

    /// Records a pulled notification's deliveries and outcome, and moves the cursor past it, in one
    /// transaction. Deliveries in `sent` went out in the same turn: they are recorded as delivered
    /// at once. Each distinct payload is stored once, however many installations it went to.
    func record(_ notification: AcceptedNotification, plans: [PlannedDelivery], sent: Set<String>, now: Date) throws {
        try database.transaction {
            let expired = notification.expiresAt <= now
            let state: NotificationState = expired ? .abandoned : plans.isEmpty ? .noTargetFound : .completed
            try database.run(
                """
                INSERT OR IGNORE INTO outcomes (notification_id, state, enqueued_at, started_at, ended_at, targets, expired)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """,
                [notification.notificationId, state.rawValue, notification.enqueuedAt.timeIntervalSince1970,
                 now.timeIntervalSince1970, now.timeIntervalSince1970, expired ? 0 : plans.count, expired ? 1 : 0])
            if !expired {
                var payloadIds: [String: Int64] = [:]
                var delivered = 0
                var failed = 0
                var platformCounts: [[String]: Int] = [:]
                if notification.send.test == true {
                    testNotifications.insert(notification.notificationId)
                    for plan in plans.prefix(Self.testResultsKept) {
                        try database.run(
                            """
                            INSERT OR IGNORE INTO test_results (delivery_id, notification_id, installation_id, platform, push_channel, outcome)
                            VALUES (?, ?, ?, ?, ?, ?)
                            """,
                            [plan.deliveryId, notification.notificationId, plan.installationId, plan.platform, plan.pushChannel,
                             plan.unreachable.map { "\($0): the hub has no delivery path to \(plan.platform) installations" }])
                    }
                }
                for plan in plans {
                    platformCounts[[plan.platform, "Targets"], default: 0] += 1
                    if let outcome = plan.unreachable {
                        let inserted = try database.run(
                            """
                            INSERT OR IGNORE INTO deliveries
                              (delivery_id, notification_id, installation_id, template, payload, expires_at, acked_at, failed_reason)
                            VALUES (?, ?, ?, ?, '', ?, ?, ?)
                            """,
                            [plan.deliveryId, notification.notificationId, plan.installationId, plan.template,
                             plan.expiresAt.timeIntervalSince1970, now.timeIntervalSince1970,
                             "\(outcome): the hub has no delivery path to \(plan.platform) installations"])
                        // Recorded again (a pull repeated after a restart), it is not counted again.
                        if inserted > 0 {
                            platformCounts[[plan.platform, outcome], default: 0] += 1
                            failed += 1
                        }
                        continue
                    }
                    let payloadId: Int64
                    if let known = payloadIds[plan.payload] {
                        payloadId = known
                    } else {
                        try database.run(
                            "INSERT INTO payloads (notification_id, body) VALUES (?, ?)", [notification.notificationId, plan.payload])
                        payloadId = database.lastInsertRowID
                        payloadIds[plan.payload] = payloadId
                    }
                    let wentOut = sent.contains(plan.deliveryId)
                    let isPush = plan.platform != Platform.linux.rawValue
                    let inserted = try database.run(
                        """
                        INSERT OR IGNORE INTO deliveries
                          (delivery_id, notification_id, installation_id, template, payload, payload_id, expires_at, rich, delivered_at,
                           platform, push_channel, headers)
                        VALUES (?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?)
                        """,
                        [plan.deliveryId, notification.notificationId, plan.installationId, plan.template, payloadId,
                         plan.expiresAt.timeIntervalSince1970, try plan.rich.map { try encoder.encode($0) },
                         wentOut ? now.timeIntervalSince1970 : nil, isPush ? plan.platform : nil, isPush ? plan.pushChannel : nil,
                         try plan.headers.map { String(decoding: try encoder.encode($0), as: UTF8.self) }])
                    if inserted > 0 && wentOut { delivered += 1 }
                }
                try add([notification.notificationId: delivered], to: "delivered")
                try add([notification.notificationId: failed], to: "failed")
                for (key, count) in platformCounts {
                    try database.run(
                        "INSERT OR IGNORE INTO platform_outcomes (notification_id, platform, outcome, count) VALUES (?, ?, ?, ?)",
                        [notification.notificationId, key[0], key[1], count])
                }
            }
            try database.run("UPDATE cursor SET after = ? WHERE id = 1 AND after < ?", [notification.sequence, notification.sequence])
        }
    }

    /// Installations with deliveries neither acknowledged nor expired: at start, whose agents must
    /// load from the store when they connect.
    func backlog(now: Date) throws -> Set<String> {
        Set(try database.query(
            "SELECT DISTINCT installation_id FROM deliveries WHERE acked_at IS NULL AND expires_at > ? AND platform IS NULL",
            [now.timeIntervalSince1970]
        ).compactMap { $0[0].string })
    }

    /// Deliveries for an installation that are neither acknowledged nor expired, oldest first.
    func pending(for installationId: String, now: Date, limit: Int = 500) throws -> [AgentDelivery] {
        try database.query(
            """
            SELECT delivery_id, notification_id, template,
                   coalesce((SELECT body FROM payloads p WHERE p.id = deliveries.payload_id), payload), expires_at, rich
            FROM deliveries
            WHERE installation_id = ? AND acked_at IS NULL AND expires_at > ?
            ORDER BY rowid LIMIT ?
            """,
            [installationId, now.timeIntervalSince1970, limit]
        ).map {
            AgentDelivery(
                deliveryId: $0[0].string ?? "", notificationId: $0[1].string ?? "", installationId: installationId,
                template: $0[2].string, payload: $0[3].string ?? "", expiresAt: Date(timeIntervalSince1970: $0[4].double ?? 0),
                rich: try $0[5].data.map { try decoder.decode(RichReference.self, from: $0) })
        }
    }

    /// Deliveries to phones and browsers that no push service has taken yet, oldest first: at
    /// start, to hand to the push services again.
    func pendingPush(now: Date, limit: Int = 100_000) throws -> [PushMessage] {
        try database.query(
            """
            SELECT delivery_id, notification_id, installation_id, platform, push_channel,
                   coalesce((SELECT body FROM payloads p WHERE p.id = deliveries.payload_id), payload), headers, expires_at
            FROM deliveries
            WHERE platform IS NOT NULL AND acked_at IS NULL AND expires_at > ?
            ORDER BY rowid LIMIT ?
            """,
            [now.timeIntervalSince1970, limit]
        ).compactMap { row in
            guard let platform = Platform(name: row[3].string ?? "") else { return nil }
            return PushMessage(
                deliveryId: row[0].string ?? "", notificationId: row[1].string ?? "", installationId: row[2].string ?? "",
                platform: platform, pushChannel: row[4].string ?? "", payload: row[5].string ?? "",
                headers: try row[6].string.map { try decoder.decode([String: String].self, from: Data($0.utf8)) } ?? [:],
                expiresAt: Date(timeIntervalSince1970: row[7].double ?? 0))
        }
    }

    /// Records what push services answered. A delivery a service took counts as delivered and
    /// acknowledged (Success); one it refused counts as failed, under the outcome name it maps to
    /// (ExpiredChannel, WrongToken and the like), with the service's words kept as the reason.
    func pushed(_ results: [(PushMessage, PushResult)], now: Date) throws {
        guard !results.isEmpty else { return }
        try database.transaction {
            for (message, result) in results {
                let outcome: String
                switch result {
                case .delivered:
                    let rows = try database.query(
                        "DELETE FROM deliveries WHERE delivery_id = ? AND installation_id = ? AND acked_at IS NULL RETURNING notification_id",
                        [message.deliveryId, message.installationId])
                    guard let notification = rows.first?[0].string else { continue }
                    try database.run(
                        "UPDATE outcomes SET delivered = delivered + 1, acknowledged = acknowledged + 1 WHERE notification_id = ?", [notification])
                    try testOutcome(notification, deliveryId: message.deliveryId, Self.successText, success: true)
                    outcome = "Success"
                case .channelExpired(let reason), .failed(_, let reason):
                    outcome = if case .failed(let name, _) = result { name } else { "ExpiredChannel" }
                    let text = "\(outcome): \(reason)"
                    let changed = try database.run(
                        "UPDATE deliveries SET acked_at = ?, failed_reason = ? WHERE delivery_id = ? AND installation_id = ? AND acked_at IS NULL",
                        [now.timeIntervalSince1970, text, message.deliveryId, message.installationId])
                    guard changed > 0 else { continue }
                    try database.run("UPDATE outcomes SET failed = failed + 1 WHERE notification_id = ?", [message.notificationId])
                    try testOutcome(
                        message.notificationId, deliveryId: message.deliveryId,
                        outcome == "ExpiredChannel" ? "The Push Notification System handle for the registration is invalid (\(reason))" : text,
                        success: false)
                case .retry, .renewCredentials:
                    continue
                }
                try countPlatform(message.notificationId, message.platform.rawValue, outcome)
            }
        }
    }

    /// Adds one to a platform's count of an outcome for a notification.
    private func countPlatform(_ notificationId: String, _ platform: String, _ outcome: String) throws {
        try database.run(
            """
            INSERT INTO platform_outcomes (notification_id, platform, outcome, count) VALUES (?, ?, ?, 1)
            ON CONFLICT (notification_id, platform, outcome) DO UPDATE SET count = count + 1
            """, [notificationId, platform, outcome])
    }

    /// Notes that deliveries went out; the first send of each counts as delivered, once per
    /// notification in the outcome however many of its deliveries went out.
    func markSent(_ deliveries: [AgentDelivery], now: Date) throws {
        guard !deliveries.isEmpty else { return }
        try database.transaction {
            var first: [String: Int] = [:]
            for delivery in deliveries {
                let changed = try database.run(
                    "UPDATE deliveries SET delivered_at = ? WHERE delivery_id = ? AND delivered_at IS NULL",
                    [now.timeIntervalSince1970, delivery.deliveryId])
                if changed > 0 { first[delivery.notificationId, default: 0] += 1 }
            }
            try add(first, to: "delivered")
        }
    }

    /// Records acknowledgements from `installationId`; each delivery counts once, and only for the
    /// installation it was meant for. An acknowledged delivery is done: its row goes, and the
    /// outcome keeps the count. Returns how many were new.
    @discardableResult
    func acknowledge(_ deliveryIds: [String], installationId: String, now: Date) throws -> Int {
        try database.transaction {
            var fresh: [String: Int] = [:]
            for id in deliveryIds {
                let rows = try database.query(
                    """
                    DELETE FROM deliveries WHERE delivery_id = ? AND installation_id = ? AND acked_at IS NULL
                    RETURNING notification_id
                    """, [id, installationId])
                if let notification = rows.first?[0].string {
                    fresh[notification, default: 0] += 1
                    try testOutcome(notification, deliveryId: id, Self.successText, success: true)
                }
            }
            try add(fresh, to: "acknowledged")
            return fresh.values.reduce(0, +)
        }
    }

    /// Adds per-notification counts to one outcome column.
    private func add(_ counts: [String: Int], to column: String) throws {
        for (notification, count) in counts {
            try database.run("UPDATE outcomes SET \(column) = \(column) + ? WHERE notification_id = ?", [count, notification])
        }
    }

    /// Records deliveries the agent gave up on; each counts once as failed, never as acknowledged.
    func fail(_ failures: [DeliveryFailure], installationId: String, now: Date) throws {
        try database.transaction {
            for failure in failures {
                guard let row = try database.queryOne(
                    "SELECT notification_id FROM deliveries WHERE delivery_id = ? AND installation_id = ? AND acked_at IS NULL",
                    [failure.deliveryId, installationId])
                else { continue }
                try database.run(
                    "UPDATE deliveries SET acked_at = ?, failed_reason = ? WHERE delivery_id = ?",
                    [now.timeIntervalSince1970, failure.reason, failure.deliveryId])
                try database.run("UPDATE outcomes SET failed = failed + 1 WHERE notification_id = ?", [row[0].string ?? ""])
                try testOutcome(row[0].string ?? "", deliveryId: failure.deliveryId, failure.reason, success: false)
            }
        }
    }

    /// Removes unacknowledged deliveries past their expiry, counting them as expired.
    func expire(now: Date) throws -> Int {
        try database.transaction {
            let rows = try database.query(
                "SELECT delivery_id, notification_id, platform FROM deliveries WHERE acked_at IS NULL AND expires_at <= ?",
                [now.timeIntervalSince1970])
            for row in rows {
                try database.run("DELETE FROM deliveries WHERE delivery_id = ?", [row[0].string ?? ""])
                try database.run("UPDATE outcomes SET expired = expired + 1 WHERE notification_id = ?", [row[1].string ?? ""])
                if let platform = row[2].string { try countPlatform(row[1].string ?? "", platform, "Expired") }
                try testOutcome(row[1].string ?? "", deliveryId: row[0].string ?? "", "Expired before the device acknowledged it", success: false)
            }
            return rows.count
        }
    }

    /// Drops failed deliveries after a day, outcomes after a week, and payloads, once none of their
    /// deliveries is left. It reads every delivery once, so it runs rarely.
    func purge(now: Date) throws {
        try database.transaction {
            try database.run("DELETE FROM deliveries WHERE acked_at IS NOT NULL AND acked_at < ?", [now.timeIntervalSince1970 - 86_400])
            try database.run(
                """
                DELETE FROM outcomes WHERE ended_at < ?
                  AND notification_id NOT IN (SELECT DISTINCT notification_id FROM deliveries)
                """, [now.timeIntervalSince1970 - 7 * 86_400])
            try database.run("DELETE FROM payloads WHERE notification_id NOT IN (SELECT DISTINCT notification_id FROM deliveries)")
            try database.run("DELETE FROM platform_outcomes WHERE notification_id NOT IN (SELECT notification_id FROM outcomes)")
            try database.run("DELETE FROM test_results WHERE notification_id NOT IN (SELECT notification_id FROM outcomes)")
            testNotifications = Set(try database.query("SELECT DISTINCT notification_id FROM test_results").compactMap { $0[0].string })
        }
    }

    /// Totals for metrics: deliveries waiting for an acknowledgement, and outcome counters.
    func totals() throws -> [String: String] {
        let pending = try database.queryOne("SELECT count(*) FROM deliveries WHERE acked_at IS NULL")?[0].int ?? 0
        let row = try database.queryOne(
            "SELECT count(*), coalesce(sum(targets),0), coalesce(sum(delivered),0), coalesce(sum(acknowledged),0), coalesce(sum(expired),0), coalesce(sum(failed),0) FROM outcomes")
        let names = ["notifications", "targets", "delivered", "acknowledged", "expired", "failed"]
        var totals = ["pendingDeliveries": String(pending)]
        for (index, name) in names.enumerated() { totals[name + "Total"] = String(row?[index].int ?? 0) }
        return totals
    }

    func outcome(_ notificationId: String) throws -> NotificationOutcome? {
        guard let row = try database.queryOne(
            """
            SELECT state, enqueued_at, started_at, ended_at, targets, delivered, acknowledged, expired, failed
            FROM outcomes WHERE notification_id = ?
            """, [notificationId])
        else { return nil }
        func date(_ value: SQLiteValue) -> Date? { value.double.map { Date(timeIntervalSince1970: $0) } }
        var outcome = NotificationOutcome(
            notificationId: notificationId, state: NotificationState(rawValue: row[0].string ?? "") ?? .completed,
            enqueuedAt: date(row[1]) ?? Date(), startedAt: date(row[2]), endedAt: date(row[3]), targets: row[4].int ?? 0,
            delivered: row[5].int ?? 0, acknowledged: row[6].int ?? 0, expired: row[7].int ?? 0, failed: row[8].int ?? 0)
        var platforms: [String: [String: Int]] = [:]
        for row in try database.query(
            "SELECT platform, outcome, count FROM platform_outcomes WHERE notification_id = ?", [notificationId])
        {
            platforms[row[0].string ?? "", default: [:]][row[1].string ?? ""] = row[2].int ?? 0
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
