import DispatchCore
import Foundation
import HubProtocol
import Storage
import StoreEngines

/// Broadcasts stored once. A tag or template send stores, for the agents away when it is
/// planned, one row per notification and one per shard with how many deliveries it parked there;
/// no row per device. Each installation has a position: marked here while its agent is
/// connected, and on leaving, the last notification planned before it left. An agent that comes
/// back catches up on the broadcasts parked after its position that still reach it, which then
/// become its own deliveries (counted as caught up); what never does counts as expired when the
/// broadcast expires.
extension DeliveryEngine {
    /// Stores the broadcast once and its parked counts per shard; returns the deliveries parked
    /// now, leaving out shards that parked it before (a record repeated after a restart).
    func park(_ notification: AcceptedNotification, _ parked: ParkedCounts) throws -> Int {
        guard !parked.counts.isEmpty else { return 0 }
        let expiresAt = notification.expiresAt.timeIntervalSince1970
        let body = String(decoding: try ledger.encoder.encode(notification), as: UTF8.self)
        try run(sql.insertBroadcast, [notification.notificationId, Int64(notification.sequence), expiresAt, body])
        var stored = 0
        for (shard, count) in parked.counts.sorted(by: { $0.key < $1.key }) where count > 0 {
            touch(shard)
            let values: [(any StoreValue)?] = [notification.notificationId, shard, Int64(parked.registryAt), count, expiresAt]
            if try run(sql.insertBroadcastShard, values) > 0 { stored += count }
        }
        return stored
    }

    func setPositions(_ positions: [(String, AgentPosition)]) throws {
        guard !positions.isEmpty else { return }
        try write {
            for (installationId, position) in positions {
                let shard = Shards.of(installationId)
                touch(shard)
                switch position {
                case .here: try run(sql.setPosition, [installationId, shard, Int64(0), true])
                case .away(let after): try run(sql.setPosition, [installationId, shard, Int64(after), false])
                }
            }
        }
    }

    func keepOwed(_ owed: [OwedDelivery], installationId: String, now: Date) throws {
        try write { _ = try makeOwed(owed, installationId: installationId, now: now) }
    }

    func catchUp(_ owed: [OwedDelivery], installationId: String, now: Date) throws -> [AgentDelivery] {
        try write {
            let made = try makeOwed(owed, installationId: installationId, now: now)
            try run(sql.setPosition, [installationId, Shards.of(installationId), Int64(0), true])
            return made
        }
    }

    /// Makes the owed deliveries after the installation's position, oldest first, each once;
    /// returns them. Inside an open group of writes they are held in memory as a broadcast's
    /// deliveries to agents here are (`UnwrittenDeliveries`), so that one acknowledged before the
    /// group commits is never written; their payload is stored once per notification and body.
    private func makeOwed(_ owed: [OwedDelivery], installationId: String, now: Date) throws -> [AgentDelivery] {
        let shard = Shards.of(installationId)
        touch(shard)
        guard !owed.isEmpty else { return [] }
        let position = try one(sql.position, [installationId])
        if let position, try position.bool("here", of: "agent_positions") { return [] }
        let after = try position?.sequence("after", of: "agent_positions") ?? 0
        var caughtUp: [String: Int] = [:]
        var made: [AgentDelivery] = []
        for delivery in owed.sorted(by: { $0.sequence < $1.sequence }) where delivery.sequence > after && delivery.plan.expiresAt > now {
            let plan = delivery.plan
            let rich = try plan.rich.map { try ledger.encoder.encode($0) }
            if groupOpen {
                // Never written before: no delivery of a parked broadcast is, but for this agent after its position.
                guard ledger.unwritten[plan.key] == nil else { continue }
                ledger.unwritten.add(plan.key, UnwrittenDeliveries.Delivery(
                    notificationId: delivery.notificationId, installationId: installationId, shard: shard, template: plan.template,
                    payloadId: try owedPayload(delivery.notificationId, plan.payload), expiresAt: plan.expiresAt, rich: rich, deliveredAt: nil))
            } else {
                let inserted = try run(sql.insertOwed, [
                    plan.deliveryId, delivery.notificationId, installationId, shard, plan.template, plan.payload,
                    plan.expiresAt.timeIntervalSince1970, rich,
                ])
                guard inserted > 0 else { continue }
            }
            caughtUp[delivery.notificationId, default: 0] += 1
            made.append(AgentDelivery(
                deliveryId: plan.deliveryId, notificationId: delivery.notificationId, installationId: installationId, template: plan.template,
                payload: plan.payload, expiresAt: plan.expiresAt, rich: plan.rich))
        }
        for (notificationId, count) in caughtUp.sorted(by: { $0.key < $1.key }) {
            try run(sql.addCaughtUp, [count, notificationId, shard])
        }
        return made
    }

    /// The payload row of a parked broadcast's body, stored at its first catch-up.
    private func owedPayload(_ notificationId: String, _ body: String) throws -> Int64 {
        let key = OwedPayload(notificationId: notificationId, body: body)
        if let id = ledger.scope.owedPayloads[key] ?? ledger.owedPayloads[key] { return id }
        let id = try oneRow(sql.insertPayload, [notificationId, body]).int64("id", of: "payloads")
        ledger.scope.owedPayloads[key] = id
        return id
    }

    func parked(now: Date, shards: Set<Int>?) throws -> [ParkedBroadcast] {
        let rows = try query(sql.parkedBroadcasts, [now.timeIntervalSince1970, sql.shards(shards ?? Set(0..<Shards.count))])
        var broadcasts: [ParkedBroadcast] = []
        var at: [String: Int] = [:]
        for row in rows {
            let table = "broadcasts"
            let id = try row.string("notification_id", of: table)
            let shard = try row.int("shard", of: table)
            let registryAt = try row.sequence("registry_at", of: table)
            if let known = at[id] {
                broadcasts[known].shards[shard] = registryAt
                continue
            }
            let notification = try ledger.decoder.decode(AcceptedNotification.self, from: Data(try row.string("body", of: table).utf8))
            at[id] = broadcasts.count
            broadcasts.append(ParkedBroadcast(notification: notification, shards: [shard: registryAt]))
        }
        return broadcasts.sorted { $0.notification.sequence < $1.notification.sequence }
    }

    func closePositions(shards: Set<Int>?) throws {
        try write {
            let cursors = try shardCursors()
            let one = try cursor()
            for shard in (shards ?? Set(0..<Shards.count)).sorted() {
                touch(shard)
                let after = shards == nil ? one : cursors[shard] ?? one
                try run(sql.closePositions, [Int64(after), shard])
            }
        }
    }

    /// Ends the parked broadcasts of `shards` past their expiry: what was parked and never caught
    /// up counts as expired. Returns how many.
    func expireParked(now: Date, shards: Set<Int>?) throws -> Int {
        let ended = try query(sql.expireBroadcasts, [now.timeIntervalSince1970, sql.shards(shards ?? Set(0..<Shards.count))])
        var expired = 0
        for row in ended {
            let table = "broadcast_shards"
            let notificationId = try row.string("notification_id", of: table)
            let shard = try row.int("shard", of: table)
            touch(shard)
            let left = max(0, try row.int("parked", of: table) - row.int("caught_up", of: table))
            guard left > 0 else { continue }
            expired += left
            ledger.scope.tally.add(notificationId) { $0.expired += left }
        }
        if !ended.isEmpty { try run(sql.dropBroadcasts, [now.timeIntervalSince1970]) }
        return expired
    }
}
