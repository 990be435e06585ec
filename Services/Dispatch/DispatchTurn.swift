import DispatchCore
import Foundation
import HubProtocol
import Push

/// What one turn of the loop has to commit.
struct DispatchTurn {
    /// Notifications planned, with the shards whose cursors move past them (nil: the one cursor),
    /// and when: a record is written as of then (its expiry, its times), however late its group is
    /// written; and what each parked for agents away.
    var records: [(AcceptedNotification, [PlannedDelivery], Set<Int>?, Date, ParkedCounts)] = []
    /// Where agents came and went, in order.
    var positions: [(String, AgentPosition)] = []
    /// Broadcasts owed to installations away whose tags change, made their own deliveries.
    var owed: [(String, [OwedDelivery])] = []
    var sent: [AgentDelivery] = []
    var acks: [(String, [DeliveryKey])] = []
    var failures: [(String, [DeliveryFailure])] = []
    /// Deliveries for push services, handed to them once the turn is written.
    var pushes: [PushMessage] = []
    /// What push services answered.
    var pushResults: [(PushMessage, PushResult)] = []

    /// Writes it to `store`: deliveries planned and sent in this turn are recorded as sent in the same write.
    func write(to store: any DeliveryStore, now: Date) throws {
        // Only records ask what went out; most turns (acknowledgements) have none. Each id is
        // hashed once, and the sets are made as large as they will be, not grown step by step.
        let sentKeys = records.isEmpty ? [] : sent.map { DeliveryKey($0.deliveryId) }
        let sentIds = Set(sentKeys)
        var plannedIds = Set<DeliveryKey>(minimumCapacity: records.isEmpty ? 0 : planned)
        for (notification, plans, shards, plannedAt, parked) in records {
            try store.record(notification, plans: plans, parked: parked, sent: sentIds, shards: shards, now: plannedAt)
            for plan in plans { plannedIds.insert(plan.key) }
        }
        // A position before what is owed, which is kept only after it.
        try store.setPositions(positions)
        for (installationId, owed) in owed { try store.keepOwed(owed, installationId: installationId, now: now) }
        // What a record of this turn planned and sent is delivered already; the rest was recorded
        // before (a notification recorded again, for other shards or with nothing left to plan, is
        // not enough: its sends may be of deliveries an earlier record planned).
        try store.markSent(plannedIds.isEmpty ? sent : sent.indices.compactMap { plannedIds.contains(sentKeys[$0]) ? nil : sent[$0] }, now: now)
        try store.acknowledge(acks, now: now)
        for (installationId, failures) in failures { try store.fail(failures, installationId: installationId, now: now) }
        try store.pushed(pushResults, now: now)
    }

    var isEmpty: Bool {
        records.isEmpty && sent.isEmpty && acks.isEmpty && failures.isEmpty && pushes.isEmpty && pushResults.isEmpty && positions.isEmpty
            && owed.isEmpty
    }

    /// How many deliveries its records planned.
    var planned: Int { records.reduce(0) { $0 + $1.1.count } }

    /// Keeps only the work of `shards`: what was planned, sent, answered and pushed for their installations.
    mutating func keep(shards: Set<Int>) {
        func held(_ installationId: String) -> Bool { shards.contains(Shards.of(installationId)) }
        records = records.compactMap { notification, plans, planned, plannedAt, parked in
            let kept = planned.map { $0.intersection(shards) }
            if let kept, kept.isEmpty { return nil }
            let parkedKept = ParkedCounts(counts: parked.counts.filter { shards.contains($0.key) }, registryAt: parked.registryAt)
            return (notification, plans.filter { held($0.installationId) }, kept, plannedAt, parkedKept)
        }
        positions.removeAll { !held($0.0) }
        owed.removeAll { !held($0.0) }
        sent.removeAll { !held($0.installationId) }
        acks.removeAll { !held($0.0) }
        failures.removeAll { !held($0.0) }
        pushes.removeAll { !held($0.installationId) }
        pushResults.removeAll { !held($0.0.installationId) }
    }

    /// Takes from a turn whose write failed what is written the same however often: its sends,
    /// acknowledgements, failures and push answers, up to a bound (past it, a delivery left open is
    /// sent again when its agent next loads). Its records are planned again; its pushes with them.
    mutating func retry(_ failed: DispatchTurn) {
        let bound = 100_000
        guard sent.count + acks.count + failures.count + pushResults.count < bound else { return }
        sent = failed.sent + sent
        positions = failed.positions + positions
        owed = failed.owed + owed
        acks = failed.acks + acks
        failures = failed.failures + failures
        pushResults = failed.pushResults + pushResults
    }
}

/// When the open group of writes commits (SQLite, where deliveries to agents are held in memory
/// until then, and one acknowledged before is never written), or when the turns gathered in
/// memory are written as one (PostgreSQL, `writes(gathered:at:awaited:)`): once the group is
/// `interval` old, at once if it holds no delivery, or if no delivery sent awaits its
/// acknowledgement (none still to come could spare a row); otherwise once the group is `longest`
/// old. What a crash loses is at most that long, and is rebuilt from the publish service's log.
///
/// What is awaited, not a quiet spell, says whether acknowledgements are still to come: on a
/// machine whose cores are busy, agents fall silent for a tenth of a second with thousands of
/// deliveries still in flight.
struct GroupCommitPolicy {
    static let interval: Duration = .milliseconds(50)
    static let longest: Duration = .seconds(2)

    private(set) var committedAt: ContinuousClock.Instant

    init(now: ContinuousClock.Instant = .now) { committedAt = now }

    /// `held`: deliveries the group holds; `awaited`: deliveries sent whose acknowledgement has not come.
    func due(at now: ContinuousClock.Instant, held: Int, awaited: Int) -> Bool {
        let age = committedAt.duration(to: now)
        guard age >= Self.interval else { return false }
        return held == 0 || awaited == 0 || age >= Self.longest
    }

    /// Where the dispatcher's turns wait in memory for their group (`CommitStrategy.gathersTurns`):
    /// whether `turn`, gathered from the turns since the last write, is written now. It is at once
    /// when it hands deliveries to push services (they go once their rows are in the store) or
    /// carries their answers (a phone shows a push sent again, where an agent shows a delivery
    /// once); else when the group is due, with the deliveries its records planned as the held ones.
    /// A group starts with its first turn: the policy is told `committed` while nothing is gathered.
    func writes(gathered turn: DispatchTurn, at now: ContinuousClock.Instant, awaited: Int) -> Bool {
        !turn.pushes.isEmpty || !turn.pushResults.isEmpty || due(at: now, held: turn.planned, awaited: awaited)
    }

    mutating func committed(at now: ContinuousClock.Instant) { committedAt = now }
}
