import Foundation
import Synchronization

/// The SQL of each statement the store makes, in one engine's dialect. Parameters are numbered
/// (?1 on SQLite, $1 on PostgreSQL), in the order each field's comment gives; → names what a
/// statement returns. Everything else the store does is shared (`DeliveryEngine`), so the two
/// engines differ in their SQL alone.
struct DeliverySQL: Sendable {
    /// () → after: the one dispatcher's cursor.
    var cursor: String
    /// () → (shard, after): each shard's cursor, never below the one dispatcher's.
    var shardCursors: String
    /// (sequence): moves the one dispatcher's cursor forward.
    var advanceCursor: String
    /// (sequence, shards): moves those shards' cursors forward.
    var advanceShardCursors: String
    /// (notification_id, body) → id.
    var insertPayload: String
    /// (delivery_id, notification_id, installation_id, shard, template, payload_id, expires_at, rich,
    /// delivered_at, acked_at, failed_reason, platform, push_channel, headers): unless there.
    var insertDelivery: String
    /// (rows) → the statement that writes that many agents' deliveries, each with (delivery_id,
    /// notification_id, installation_id, shard, template, payload_id, expires_at, rich,
    /// delivered_at): unless there.
    var insertAgentDeliveries: @Sendable (Int) -> String
    /// (delivery_id, notification_id, installation_id, platform, push_channel, outcome): unless there.
    var insertTestResult: String
    /// (now, installation_id, topic, delivery_id): a newer delivery with a topic replaces the
    /// installation's open ones with that topic not yet sent, which expire now; then it takes the topic.
    var replaceTopic: String
    /// (topic, delivery_id).
    var setTopic: String
    /// (now, delivery_id): the first send time, where there is none.
    var markDelivered: String
    /// (delivery_id, installation_id) → notification_id: deletes a delivery still open.
    var removeDelivery: String
    /// (now, reason, delivery_id, installation_id) → notification_id: closes a delivery still open as failed.
    var closeDelivery: String
    /// (now) → (delivery_id, notification_id, platform): deletes open deliveries past their expiry, in one statement…
    var removeExpired: String
    /// …(now, shards), of those shards.
    var removeExpiredOfShards: String
    /// (outcome, success, delivery_id): a test result not yet known.
    var setTestOutcome: String
    /// (notification_id, state, enqueued_at, at, targets, expired): an outcome row written once…
    var openOutcomes: @Sendable (Int) -> String
    /// …or added to what other dispatchers wrote for their shards, the state saying what any found.
    var openOutcomesAdding: @Sendable (Int) -> String
    /// (delivered, acknowledged, expired, failed, notification_id).
    var addToOutcome: String
    /// (notification_id, platform, outcome, count): a platform count written once…
    var platformCount: String
    /// …or added to.
    var platformCountAdding: String
    /// () → notification_id: the test sends with results kept.
    var testNotifications: String
    /// (notification_id) → (installation_id, platform, push_channel, outcome, success), by delivery id.
    var testResults: String
    /// (now) → installation_id: agents' installations with open deliveries…
    var backlog: String
    /// …(now, shards), of those shards.
    var backlogOfShards: String
    /// (installation_id, now, limit) → (delivery_id, notification_id, template, body, expires_at, rich, sent: whether it
    /// went out before), oldest first.
    var pending: String
    /// (now, limit) → (delivery_id, notification_id, installation_id, platform, push_channel, body, headers,
    /// expires_at): open push deliveries, oldest first…
    var pendingPush: String
    /// …(now, limit, shards), of those shards.
    var pendingPushOfShards: String
    /// (notification_id) → (state, enqueued_at, started_at, ended_at, targets, delivered, acknowledged, expired, failed).
    var outcome: String
    /// (notification_id) → (platform, outcome, count).
    var platformOutcomes: String
    /// (notification_id, now) → n: how many of its deliveries to push services have no answer yet, unexpired.
    var waitingPush: String
    /// () → n: how many deliveries wait for an acknowledgement.
    var openDeliveries: String
    /// () → (notifications, targets, delivered, acknowledged, expired, failed) over the outcomes.
    var outcomeTotals: String
    /// Purging, in order: each statement with (cutoff) when it has an age (rows older go), else ().
    var purge: [(sql: String, age: TimeInterval?)]
    /// (id, endpoint, now).
    var heartbeat: String
    /// (since) → n: how many dispatchers were seen since.
    var liveDispatchers: String
    /// (until, owner) → (shard, epoch).
    var renewLeases: String
    /// (owner, endpoint, until, now, count) → (shard, epoch): never one another claimer takes at
    /// once; each claim moves the shard's epoch on.
    var claimLeases: String
    /// (owner, fenced shards) → shard: of the shards given with their epochs, those the owner still
    /// holds at that epoch, locked so that no claim changes them before the transaction ends.
    var fenceCheck: String
    /// (owner, shards).
    var releaseLeases: String
    /// (now) → (shard, endpoint).
    var leaseOwners: String
    /// (notification_id, sequence, expires_at, body): a broadcast stored once, unless there.
    var insertBroadcast: String
    /// (notification_id, shard, registry_at, parked, expires_at): what it parked in a shard, unless there.
    var insertBroadcastShard: String
    /// (now, shards) → (notification_id, shard, registry_at, body): the broadcasts parked in those shards, not expired.
    var parkedBroadcasts: String
    /// (count, notification_id, shard): deliveries of a parked broadcast made an installation's own.
    var addCaughtUp: String
    /// (now, shards) → (notification_id, shard, parked, caught_up): deletes what expired broadcasts parked there.
    var expireBroadcasts: String
    /// (now): deletes expired broadcasts parked in no shard any more.
    var dropBroadcasts: String
    /// (installation_id) → (after, here): an installation's position.
    var position: String
    /// (installation_id, shard, after, here).
    var setPosition: String
    /// (after, shard): the agents marked here in a shard are away since `after`.
    var closePositions: String
    /// (delivery_id, notification_id, installation_id, shard, template, payload, expires_at, rich): an
    /// owed delivery of a parked broadcast, its payload its own, unless there.
    var insertOwed: String
    /// Shards as the engine's list parameter.
    var shards: @Sendable (Set<Int>) -> String

    /// `rows` groups of `width` numbered parameters, each written by `group` from its first
    /// number: the VALUES of a statement that writes many rows.
    static func values(rows: Int, width: Int, _ group: (Int) -> String) -> String {
        (0..<rows).map { group($0 * width + 1) }.joined(separator: ", ")
    }
    /// `make` for a statement that writes many rows, each text made once per row count (up to
    /// `upTo` rows) and then looked up: the text of a statement of 64 rows costs more to build
    /// than the rows cost to write.
    static func remembered(upTo limit: Int = 64, _ make: @escaping @Sendable (Int) -> String) -> @Sendable (Int) -> String {
        let texts = RememberedTexts()
        return { rows in
            guard rows <= limit else { return make(rows) }
            if let text = texts.made.withLock({ $0[rows] }) { return text }
            let text = make(rows)
            texts.made.withLock { $0[rows] = text }
            return text
        }
    }

    /// The VALUES of `rows` outcome rows, each (id, state, enqueued at, at, at, targets, expired)
    /// from six parameters, numbered after `marker` (`?` or `$`).
    static func outcomeValues(rows: Int, marker: String) -> String {
        values(rows: rows, width: 7) { first in
            let number = { (offset: Int) in marker + String(first + offset) }
            return "(\(number(0)), \(number(1)), \(number(2)), \(number(3)), \(number(3)), \(number(4)), \(number(5)), \(number(6)))"
        }
    }
    /// Shards with their epochs ("shard:epoch") as the engine's list parameter.
    var fencedShards: @Sendable ([String]) -> String
}

/// Statement texts made so far, by row count (`DeliverySQL.remembered`).
private final class RememberedTexts: Sendable {
    let made = Mutex<[Int: String]>([:])
}
