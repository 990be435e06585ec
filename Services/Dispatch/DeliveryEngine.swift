import DispatchCore
import Foundation
import StoreEngines
import Synchronization
import HubProtocol
import Postgres
import Push
import Storage

/// One engine: its SQL, its connection, and its way of committing (`writeTurn`, `flush`). The
/// store's behaviour over them lives in this protocol's extension, alike for both engines.
protocol DeliveryEngine: DeliveryStore, EngineBacked {
    static var sql: DeliverySQL { get }
    var ledger: DeliveryLedger { get }
    /// Whether a group of writes is open whose end writes the agents' deliveries held in memory
    /// (`UnwrittenDeliveries`): on SQLite the group left open across turns, until it commits; on
    /// PostgreSQL the write under way, since there a write is a whole group of turns.
    var groupOpen: Bool { get }
    /// Inserts agents' deliveries of one notification, each under its id, in one statement, unless
    /// stored before; returns the ids it inserted. Only where the strategy batches rows.
    func insertAgentDeliveries(_ rows: ArraySlice<(String, UnwrittenDeliveries.Delivery)>) throws -> Set<String>
    /// Removes the unacknowledged deliveries of (delivery id, installation id) in one statement;
    /// returns each removed one's (delivery id, notification id). Only where the strategy batches rows.
    func removeDeliveries(_ pairs: ArraySlice<(String, String)>) throws -> [(String, String)]
    /// Throws `StoreSessionChanged` while a new session of the store's server has not been acted on
    /// by the dispatcher: what it planned before may be ahead of the store, or of another history.
    func checkSession() throws
}

/// The store's server was reached in a session the dispatcher has not acted on yet (its cursors
/// read again, its sessions loaded again: `DispatchShell.storeSessions`); the write was not made.
struct StoreSessionChanged: Error, CustomStringConvertible {
    var description: String { "the store is on a new session; what was planned before it is planned again from the store's cursors" }
}

extension DeliveryEngine {
    var held: Int { ledger.unwritten.count }

    /// One session that never changes history (SQLite).
    func checkSession() throws {}

    static var successText: String { "The Notification was successfully sent to the Push Notification System" }
    static var testResultsKept: Int { 10 }

    var sql: DeliverySQL { Self.sql }

    private var batchesRows: Bool { commits.batchesRows }
    func insertAgentDeliveries(_ rows: ArraySlice<(String, UnwrittenDeliveries.Delivery)>) throws -> Set<String> {
        preconditionFailure("\(Self.self) inserts a statement per row")
    }
    func removeDeliveries(_ pairs: ArraySlice<(String, String)>) throws -> [(String, String)] {
        preconditionFailure("\(Self.self) removes a statement per row")
    }


    /// Rows, each read as a (key, value) by `entry`, as a dictionary.
    func dictionary<Key: Hashable, Item>(
        _ sql: String, _ values: [(any StoreValue)?], _ entry: (Row) throws -> (Key, Item)
    ) throws -> [Key: Item] {
        Dictionary(try query(sql, values).map(entry), uniquingKeysWith: { $1 })
    }

    /// A lease row's (shard, epoch).
    static func leaseEpoch(_ row: Row) throws -> (Int, UInt64) {
        (try row.int("shard", of: "leases"), try row.sequence("epoch", of: "leases"))
    }

    /// Runs `body` in a transaction; the outermost writes the outcome counts gathered meanwhile
    /// before it commits. A write inside another joins it with no savepoint of its own (a
    /// statement each on SQLite, a round trip each on PostgreSQL): no caller goes on after a part
    /// fails, so the parts stand or fall with the outermost. What the parts change is gathered in
    /// the outermost's `WriteScope`, which the ledger takes in once it commits and drops when it
    /// fails, with the held deliveries' changes undone. Where the store is fenced, the outermost
    /// also checks the leases of every shard written for, last, so that a claim made meanwhile
    /// rolls the whole write back.
    func write<T>(_ body: () throws -> T) throws -> T {
        guard ledger.open == nil else { return try body() }
        let mark = ledger.unwritten.mark
        ledger.open = WriteScope(mark: mark, knownCursor: ledger.knownCursor)
        defer { ledger.open = nil }
        do {
            let result = try transaction {
                try checkSession()
                let result = try body()
                try writeCursors()
                if commits.gathersTurns { try writeHeld() }
                try writeTally()
                try checkFence()
                return result
            }
            ledger.settle(ledger.scope)
            return result
        } catch {
            ledger.unwritten.revert(to: mark)
            throw error
        }
    }

    /// Writes the deliveries held in memory, oldest first, before a statement that reads or
    /// sweeps deliveries, and before the group commits.
    func writeHeld() throws {
        guard !ledger.unwritten.isEmpty else { return }
        try write {
            let held = ledger.unwritten.takeAll()
            if batchesRows {
                // A statement per run of one notification's deliveries, up to a batch.
                var start = held.startIndex
                while start < held.endIndex {
                    let notificationId = held[start].1.notificationId
                    var end = start + 1
                    while end < held.endIndex, held[end].1.notificationId == notificationId { end += 1 }
                    for rows in held[start..<end].slices(of: commits.rowsPerStatement) {
                        for (_, delivery) in rows { touch(delivery.shard) }
                        _ = try insertAgentDeliveries(rows)
                    }
                    start = end
                }
                return
            }
            // A statement per 64 rows: a statement's own cost is shared, and each row is still bound alone.
            for rows in held.slices(of: Self.rowsPerInsert) {
                var values: [(any StoreValue)?] = []
                values.reserveCapacity(rows.count * 9)
                for (id, delivery) in rows {
                    touch(delivery.shard)
                    values += [
                        id, delivery.notificationId, delivery.installationId, delivery.shard, delivery.template, delivery.payloadId,
                        delivery.expiresAt.timeIntervalSince1970, delivery.rich, delivery.deliveredAt?.timeIntervalSince1970,
                    ]
                }
                try run(sql.insertAgentDeliveries(rows.count), values)
            }
        }
    }

    static var rowsPerInsert: Int { 64 }

    /// Whether `sequence` is past every notification this store has recorded (with one dispatcher).
    private func pastCursor(_ sequence: UInt64) throws -> Bool {
        let known = try ledger.scope.knownCursor ?? cursor()
        ledger.scope.knownCursor = known
        return sequence > known
    }

    /// Whether `sequence` is past every notification recorded for `shard`'s installations.
    private func pastCursor(_ sequence: UInt64, shard: Int) throws -> Bool {
        let cursors = try ledger.scope.shardCursors ?? shardCursors()
        ledger.scope.shardCursors = cursors
        return sequence > cursors[shard] ?? 0
    }

    var fence: LeaseFence? {
        get { ledger.fence }
        set { ledger.fence = newValue }
    }

    /// Notes that the write under way writes for `shard`.
    func touch(_ shard: @autoclosure () -> Int) {
        if ledger.fence != nil { ledger.scope.touched.insert(shard()) }
    }

    /// Throws `LeaseLost` unless the fence's owner holds every shard written for at its epoch; the
    /// lease rows stay locked until the transaction ends, so none changes hands before it commits.
    private func checkFence() throws {
        let touched = ledger.scope.touched
        guard let fence = ledger.fence, !touched.isEmpty else { return }
        var lost = touched.filter { fence.epochs[$0] == nil }
        let asked = touched.subtracting(lost).sorted().map { "\($0):\(fence.epochs[$0] ?? 0)" }
        if !asked.isEmpty {
            let held = Set(try query(sql.fenceCheck, [fence.owner, sql.fencedShards(asked)]).map { try $0.int("shard", of: "leases") })
            lost.formUnion(touched.subtracting(lost).subtracting(held))
        }
        if !lost.isEmpty { throw LeaseLost(shards: lost) }
    }

    private func writeTally() throws {
        let tally = ledger.scope.tally
        for step in tally.outcomeSteps(rowsPerStatement: Self.rowsPerInsert) {
            switch step {
            case .open(let adds, let ids):
                var values: [(any StoreValue)?] = []
                values.reserveCapacity(ids.count * 7)
                for id in ids {
                    let opening = tally.openings[id]!
                    values += [
                        id, opening.state.rawValue, opening.enqueuedAt.timeIntervalSince1970, opening.at.timeIntervalSince1970,
                        opening.targets, opening.expired, opening.hub,
                    ]
                }
                try run(adds ? sql.openOutcomesAdding(ids.count) : sql.openOutcomes(ids.count), values)
            case .count(let id):
                let counts = tally.counts[id]!
                try run(sql.addToOutcome, [counts.delivered, counts.acknowledged, counts.expired, counts.failed, id])
            }
        }
        for key in Set(tally.platformOpenings.keys).union(tally.platformAdds.keys).sorted() {
            let values: [(any StoreValue)?] = [key.notificationId, key.platform, key.outcome]
            if let opening = tally.platformOpenings[key] {
                try run(opening.adds ? sql.platformCountAdding : sql.platformCount, values + [opening.count])
            }
            if let count = tally.platformAdds[key] { try run(sql.platformCountAdding, values + [count]) }
        }
    }

    // MARK: Cursors

    /// The one dispatcher's cursor, with where the write under way moves it.
    func cursor() throws -> UInt64 {
        max(try oneRow(sql.cursor).sequence("after", of: "cursor"), ledger.open?.cursorTo ?? 0)
    }

    /// The shards' cursors, with where the write under way moves them.
    func shardCursors() throws -> [Int: UInt64] {
        var cursors = try dictionary(sql.shardCursors, []) { (try $0.int("shard", of: "shard_cursors"), try $0.sequence("after", of: "shard_cursors")) }
        // A shard's cursor reads as no less than the one dispatcher's (`sql.shardCursors`).
        let one = ledger.open?.cursorTo ?? 0
        let moving = ledger.open?.shardCursorsTo ?? [:]
        for (shard, cursor) in cursors { cursors[shard] = max(cursor, moving[shard] ?? 0, one) }
        return cursors
    }

    /// Moves the cursors where the write under way recorded to: the one dispatcher's, and each
    /// shard's, in a statement per distinct place.
    private func writeCursors() throws {
        if let to = ledger.scope.cursorTo { try run(sql.advanceCursor, [Int64(to)]) }
        for (to, moves) in Dictionary(grouping: ledger.scope.shardCursorsTo, by: \.value).sorted(by: { $0.key < $1.key }) {
            try run(sql.advanceShardCursors, [Int64(to), sql.shards(Set(moves.map(\.key)))])
        }
    }

    // MARK: Writes

    func record(
        _ notification: AcceptedNotification, plans: [PlannedDelivery], parked: ParkedCounts, sent: Set<DeliveryKey>, shards: Set<Int>?, now: Date
    ) throws {
        try write {
            let id = notification.notificationId
            let expired = notification.expiresAt <= now
            let state: NotificationState = expired ? .abandoned : plans.isEmpty && parked.counts.values.allSatisfy({ $0 == 0 }) ? .noTargetFound : .completed
            let adds = shards != nil
            // Targets are the deliveries this record stored: one recorded before (by this
            // dispatcher before a restart, or by another) counts once, however often it is recorded.
            // A notification past the cursor (with shards, past its shard's cursor) was never
            // recorded for an installation: its agents' deliveries can be held in memory until the
            // group commits. Any other is checked against the rows written (held ones are written
            // first, where an agent's delivery is).
            let holds = try groupOpen && notification.send.test != true && (shards != nil || pastCursor(notification.sequence))
            // A shard's parked deliveries count once, however often the broadcast is recorded.
            let parkedCount = expired ? 0 : try park(notification, parked)
            let targets = expired
                ? 0
                : try recordDeliveries(
                    notification, plans: plans, parked: parkedCount, sent: sent, now: now, adds: adds, holds: holds, byShard: shards != nil)
            ledger.scope.tally.open(id, OutcomeOpening(
                state: state, enqueuedAt: notification.enqueuedAt, at: now, targets: targets, expired: expired ? 1 : 0,
                hub: notification.send.hub, adds: adds))
            if shards == nil, let known = ledger.scope.knownCursor { ledger.scope.knownCursor = max(known, notification.sequence) }
            // The cursors move as the write ends (`writeCursors`).
            if let shards {
                for shard in shards {
                    touch(shard)
                    if let cursor = ledger.scope.shardCursors?[shard] { ledger.scope.shardCursors?[shard] = max(cursor, notification.sequence) }
                    ledger.scope.shardCursorsTo[shard] = max(ledger.scope.shardCursorsTo[shard] ?? 0, notification.sequence)
                }
            } else {
                ledger.scope.cursorTo = max(ledger.scope.cursorTo ?? 0, notification.sequence)
            }
        }
    }

    /// Stores the deliveries not stored yet; returns how many it stored. `holds`: agents'
    /// deliveries may be held, each (`byShard`) where its shard's cursor is behind the notification.
    private func recordDeliveries(
        _ notification: AcceptedNotification, plans: [PlannedDelivery], parked: Int, sent: Set<DeliveryKey>, now: Date, adds: Bool,
        holds: Bool, byShard: Bool
    ) throws -> Int {
        let id = notification.notificationId
        var stored = parked
        var payloadIds: [String: Int64] = [:]
        // The last payload's id: a broadcast's plans share theirs, and comparing is cheaper than hashing.
        var lastPayload: (body: String, id: Int64)?
        var platformCounts: [PlatformCountKey: Int] = [:]
        // Targets per platform, and deliveries that went out, counted here and added once.
        var targets: [String: Int] = parked > 0 ? [Platform.linux.rawValue: parked] : [:]
        var delivered = 0
        // Agents' deliveries inserted together after the loop, where a statement takes many rows.
        var batch: [(String, UnwrittenDeliveries.Delivery)] = []
        if notification.send.test == true {
            ledger.testNotifications.insert(id)
            for plan in plans.prefix(Self.testResultsKept) {
                let outcome = plan.unreachable.map { Self.noPath($0, plan.platform) }
                try run(sql.insertTestResult, [plan.deliveryId, id, plan.installationId, plan.platform, plan.pushChannel, outcome])
            }
        }
        for plan in plans {
            // The columns after payload_id: expires_at, rich, delivered_at, acked_at, failed_reason, platform, push_channel, headers.
            let shard = Shards.of(plan.installationId)
            touch(shard)
            var delivery: [(any StoreValue)?] { [plan.deliveryId, id, plan.installationId, shard, plan.template] }
            if let outcome = plan.unreachable {
                // Over as soon as it is recorded; recorded again (a pull repeated after a restart), it is not counted again.
                let inserted = try run(
                    sql.insertDelivery,
                    delivery + [nil, plan.expiresAt.timeIntervalSince1970, nil, nil, now.timeIntervalSince1970, Self.noPath(outcome, plan.platform),
                                nil, nil, nil])
                if inserted > 0 {
                    stored += 1
                    targets[plan.platform, default: 0] += 1
                    platformCounts[PlatformCountKey(notificationId: id, platform: plan.platform, outcome: outcome), default: 0] += 1
                    ledger.scope.tally.add(id) { $0.failed += 1 }
                }
                continue
            }
            let payloadId: Int64
            if let lastPayload, lastPayload.body == plan.payload {
                payloadId = lastPayload.id
            } else if let known = payloadIds[plan.payload] {
                payloadId = known
            } else {
                payloadId = try oneRow(sql.insertPayload, [id, plan.payload]).int64("id", of: "payloads")
                payloadIds[plan.payload] = payloadId
            }
            lastPayload = (plan.payload, payloadId)
            let wentOut = sent.contains(plan.key)
            let rich = try plan.rich.map { try ledger.encoder.encode($0) }
            // An agent's delivery is held in memory until the group commits (past its cursor), or
            // goes with the others in one statement where a statement takes many rows, counted
            // then by the ids the statement says it inserted.
            let agent = plan.isPlainAgentDelivery
            let hold = try agent && holds && (!byShard || pastCursor(notification.sequence, shard: shard))
            if agent, hold || batchesRows {
                let delivery = UnwrittenDeliveries.Delivery(
                    notificationId: id, installationId: plan.installationId, shard: shard, template: plan.template, payloadId: payloadId,
                    expiresAt: plan.expiresAt, rich: rich, deliveredAt: wentOut ? now : nil)
                guard hold else {
                    batch.append((plan.deliveryId, delivery))
                    continue
                }
                ledger.unwritten.add(plan.key, delivery)
                stored += 1
                targets[plan.platform, default: 0] += 1
                if wentOut { delivered += 1 }
                continue
            }
            // An agent's delivery written at once comes after those held, as they were recorded
            // first (the agent loads them in the order of their rows), and is checked against them.
            if plan.platform == Platform.linux.rawValue { try writeHeld() }
            // A phone's or browser's delivery keeps what its push service needs; a Linux agent's leaves it empty.
            var push: [(any StoreValue)?] = [nil, nil, nil]
            if plan.platform != Platform.linux.rawValue {
                push = [plan.platform, plan.pushChannel, try plan.headers.map { String(decoding: try ledger.encoder.encode($0), as: UTF8.self) }]
            }
            let inserted = try run(
                sql.insertDelivery,
                delivery + [payloadId, plan.expiresAt.timeIntervalSince1970, rich, wentOut ? now.timeIntervalSince1970 : nil, nil, nil] + push)
            guard inserted > 0 else { continue }
            if let topic = plan.headers?[AppPushMessage.topicHeader] {
                // The replaced ones are counted expired by the next sweep, as their expiry has come.
                try run(sql.replaceTopic, [now.timeIntervalSince1970, plan.installationId, topic, plan.deliveryId])
                try run(sql.setTopic, [topic, plan.deliveryId])
            }
            stored += 1
            targets[plan.platform, default: 0] += 1
            if wentOut { delivered += 1 }
        }
        // After those held, which were recorded first, and checked against them.
        if !batch.isEmpty { try writeHeld() }
        for rows in batch.slices(of: commits.rowsPerStatement) {
            let inserted = try insertAgentDeliveries(rows)
            stored += inserted.count
            targets[Platform.linux.rawValue, default: 0] += inserted.count
            if !sent.isEmpty { delivered += inserted.reduce(0) { $0 + (sent.contains(DeliveryKey($1)) ? 1 : 0) } }
        }
        for (platform, count) in targets {
            platformCounts[PlatformCountKey(notificationId: id, platform: platform, outcome: "Targets"), default: 0] += count
        }
        if delivered > 0 { ledger.scope.tally.add(id) { $0.delivered += delivered } }
        for (key, count) in platformCounts { ledger.scope.tally.openPlatform(key, count: count, adds: adds) }
        return stored
    }

    private static func noPath(_ outcome: String, _ platform: String) -> String {
        "\(outcome): the hub has no delivery path to \(platform) installations"
    }

    /// Records what became of one of a test send's deliveries, if it is one of those kept.
    private func testOutcome(_ notificationId: String, deliveryId: String, _ outcome: String, success: Bool) throws {
        guard ledger.testNotifications.contains(notificationId) else { return }
        try run(sql.setTestOutcome, [outcome, success, deliveryId])
    }

    private func removeDelivery(_ deliveryId: String, installationId: String) throws -> String? {
        try one(sql.removeDelivery, [deliveryId, installationId]).map { try $0.string("notification_id", of: "deliveries") }
    }

    private func closeDelivery(_ deliveryId: String, installationId: String, reason: String, now: Date) throws -> String? {
        try one(sql.closeDelivery, [now.timeIntervalSince1970, reason, deliveryId, installationId]).map {
            try $0.string("notification_id", of: "deliveries")
        }
    }

    func markSent(_ deliveries: [AgentDelivery], now: Date) throws {
        guard !deliveries.isEmpty else { return }
        try write {
            for delivery in deliveries {
                touch(Shards.of(delivery.installationId))
                let key = DeliveryKey(delivery.deliveryId)
                if ledger.unwritten[key] != nil {
                    if ledger.unwritten.markSent(key, at: now) { ledger.scope.tally.add(delivery.notificationId) { $0.delivered += 1 } }
                    continue
                }
                guard try run(sql.markDelivered, [now.timeIntervalSince1970, delivery.deliveryId]) > 0 else { continue }
                ledger.scope.tally.add(delivery.notificationId) { $0.delivered += 1 }
            }
        }
    }

    @discardableResult
    func acknowledge(_ acks: [(String, [DeliveryKey])], now: Date) throws -> Int {
        guard !acks.isEmpty else { return 0 }
        return try write {
            var fresh = 0
            // Agents acknowledge mostly deliveries of one notification: they are counted together,
            // one count per run of the same notification.
            var run: (notificationId: String, count: Int)?
            func count(_ notificationId: String) {
                if let current = run, current.notificationId == notificationId {
                    run?.count += 1
                } else {
                    if let current = run { ledger.scope.tally.add(current.notificationId) { $0.acknowledged += current.count } }
                    run = (notificationId, 1)
                }
            }
            var written: [(String, String)] = []
            for (installationId, deliveryIds) in acks {
                touch(Shards.of(installationId))
                for id in deliveryIds {
                    // Held and acknowledged before its group commits: never written.
                    if let held = ledger.unwritten.remove(id, installationId: installationId) {
                        fresh += 1
                        ledger.scope.acknowledgedUnwritten += 1
                        count(held.notificationId)
                    } else {
                        written.append((id.id, installationId))
                    }
                }
            }
            var removed: [(String, String)] = []
            if batchesRows {
                for pairs in written.slices(of: commits.rowsPerStatement) { removed += try removeDeliveries(pairs) }
            } else {
                for (id, installationId) in written {
                    if let notification = try removeDelivery(id, installationId: installationId) { removed.append((id, notification)) }
                }
            }
            for (id, notification) in removed {
                fresh += 1
                count(notification)
                try testOutcome(notification, deliveryId: id, Self.successText, success: true)
            }
            if let run { ledger.scope.tally.add(run.notificationId) { $0.acknowledged += run.count } }
            return fresh
        }
    }

    func fail(_ failures: [DeliveryFailure], installationId: String, now: Date) throws {
        try write {
            touch(Shards.of(installationId))
            if failures.contains(where: { ledger.unwritten[DeliveryKey($0.deliveryId)] != nil }) { try writeHeld() }
            for failure in failures {
                guard let notification = try closeDelivery(failure.deliveryId, installationId: installationId, reason: failure.reason, now: now)
                else { continue }
                ledger.scope.tally.add(notification) { $0.failed += 1 }
                try testOutcome(notification, deliveryId: failure.deliveryId, failure.reason, success: false)
            }
        }
    }

    func pushed(_ results: [(PushMessage, PushResult)], now: Date) throws {
        guard !results.isEmpty else { return }
        try write {
            for (message, result) in results {
                touch(Shards.of(message.installationId))
                let outcome: String
                switch result {
                case .delivered, .channelMoved:
                    guard let notification = try removeDelivery(message.deliveryId, installationId: message.installationId) else { continue }
                    ledger.scope.tally.add(notification) {
                        $0.delivered += 1
                        $0.acknowledged += 1
                    }
                    try testOutcome(notification, deliveryId: message.deliveryId, Self.successText, success: true)
                    outcome = "Success"
                case .channelExpired(let reason, let name), .failed(let name, let reason):
                    outcome = name
                    let text = "\(outcome): \(reason)"
                    guard try closeDelivery(message.deliveryId, installationId: message.installationId, reason: text, now: now) != nil
                    else { continue }
                    ledger.scope.tally.add(message.notificationId) { $0.failed += 1 }
                    try testOutcome(
                        message.notificationId, deliveryId: message.deliveryId,
                        result.isChannelGone ? "The Push Notification System handle for the registration is invalid (\(reason))" : text,
                        success: false)
                case .retry, .renewCredentials:
                    continue
                }
                ledger.scope.tally.countPlatform(message.notificationId, message.platform.rawValue, outcome)
            }
        }
    }

    func expire(now: Date, shards: Set<Int>?) throws -> Int {
        if let shards, shards.isEmpty { return 0 }
        return try write {
            // Held ones past their expiry go from memory; agents' deliveries have no platform count.
            let expiredHeld = ledger.unwritten.removeExpired(at: now)
            for (_, delivery) in expiredHeld { ledger.scope.tally.add(delivery.notificationId) { $0.expired += 1 } }
            let removed: [Row]
            if let shards {
                for shard in shards { touch(shard) }
                removed = try query(sql.removeExpiredOfShards, [now.timeIntervalSince1970, sql.shards(shards)])
            } else {
                removed = try query(sql.removeExpired, [now.timeIntervalSince1970])
            }
            for row in removed {
                let (deliveryId, notificationId) = (try row.string("delivery_id", of: "deliveries"), try row.string("notification_id", of: "deliveries"))
                ledger.scope.tally.add(notificationId) { $0.expired += 1 }
                if let platform = try row.optionalString("platform", of: "deliveries") { ledger.scope.tally.countPlatform(notificationId, platform, "Expired") }
                try testOutcome(notificationId, deliveryId: deliveryId, "Expired before the device acknowledged it", success: false)
            }
            return removed.count + expiredHeld.count + (try expireParked(now: now, shards: shards))
        }
    }

    func purge(now: Date) throws {
        try writeHeld()
        try transaction {
            for (statement, age) in sql.purge {
                try run(statement, age.map { [now.timeIntervalSince1970 - $0] } ?? [])
            }
            ledger.testNotifications = try testNotificationIds()
            ledger.owedPayloads = [:]
        }
    }
}

extension RandomAccessCollection where Index == Int, SubSequence == ArraySlice<Element> {
    /// The elements in consecutive slices of at most `size`: the rows of one statement each.
    func slices(of size: Int) -> [ArraySlice<Element>] {
        stride(from: startIndex, to: endIndex, by: size).map { self[$0..<Swift.min($0 + size, endIndex)] }
    }
}
