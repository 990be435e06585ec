import DispatchCore
import Foundation
import HubProtocol
import Push

/// The dispatcher's store: how far it has pulled, each notification's outcome, and every delivery
/// until its agent acknowledges it, a push service takes it, or it expires. Two engines implement
/// it: SQLite, embedded, the default; and PostgreSQL, which several dispatchers can share, each
/// serving the installations of the shards it holds leases on. The contract tests (DispatchTests)
/// hold both to the same behaviour.
///
/// As a `LeaseStore` it keeps the dispatchers that share the agents: each one's heartbeat (seen
/// within a period, it is alive), and a lease per shard, which a claim takes only where it is
/// vacant or has run out, never one that another claimer takes at the same time; renewed by its
/// owner, given back by a release, and read as the agent endpoint of each shard's live owner.
/// `shardCursors` says how far each shard was planned: never behind `cursor()`, since one
/// dispatcher plans every shard.
protocol DeliveryStore: LeaseStore {
    /// The leases this store's writes are fenced by, where dispatchers share it: every write
    /// transaction checks, before it commits, that the owner still holds each shard it wrote for
    /// at the epoch given here, and is rolled back whole with `LeaseLost` when not. Nil: unfenced,
    /// as with one dispatcher.
    var fence: LeaseFence? { get set }
    /// Runs one turn's writes in one transaction (a savepoint of the open group on SQLite; on
    /// PostgreSQL a transaction of its own, for the turns the dispatcher gathered): they stand or
    /// fall together.
    func writeTurn(_ body: () throws -> Void) throws
    /// Commits what the turns wrote since the last call, on an engine that keeps a group of writes
    /// open (SQLite); where each write commits on its own (PostgreSQL) there is nothing to do.
    func flush() throws
    /// Commits what is open and lets go of the database. When the last group of writes cannot be
    /// committed it is rolled back whole, as a crash would lose it, and the error says why: what it
    /// held is planned again from the publish service's log at the next start.
    func close() throws
    /// Deliveries held in memory until the open group of writes commits (`UnwrittenDeliveries`).
    var held: Int { get }
    /// How this engine commits the dispatcher's turns.
    var commits: CommitStrategy { get }

    /// The sequence of the last notification planned, with one dispatcher.
    func cursor() throws -> UInt64
    /// Records a pulled notification's deliveries and outcome, and moves the cursor past it, in one
    /// transaction: with `shards` nil the one dispatcher's cursor, else the cursor of each of those
    /// shards (the dispatcher's own), whose targets and counts add to what other dispatchers wrote
    /// for their shards. Deliveries in `sent` went out in the same turn: they are recorded as
    /// delivered at once. Each distinct payload is stored once, however many installations it went to.
    ///
    /// `parked`: deliveries to agents away, by shard, stored once with the broadcast and counted
    /// among its targets (once per shard, however often it is recorded); each becomes a delivery
    /// of its own when its agent comes back (`catchUp`) or its tags change (`keepOwed`), and
    /// counts as expired when the broadcast expires if it never did.
    func record(
        _ notification: AcceptedNotification, plans: [PlannedDelivery], parked: ParkedCounts, sent: Set<DeliveryKey>, shards: Set<Int>?, now: Date
    ) throws
    /// Marks where installations' agents are: here, or away since a notification (`AgentPosition`).
    func setPositions(_ positions: [(String, AgentPosition)]) throws
    /// Turns the broadcasts an installation is owed into its deliveries, those after its position
    /// (none while its agent is marked here), each counted as caught up with its broadcast.
    func keepOwed(_ owed: [OwedDelivery], installationId: String, now: Date) throws
    /// `keepOwed` and, in the same write, marks the agent here: what a hello does before loading.
    /// Returns the deliveries it made, oldest first.
    @discardableResult
    func catchUp(_ owed: [OwedDelivery], installationId: String, now: Date) throws -> [AgentDelivery]
    /// The broadcasts parked for `shards` (nil: every shard) and not expired, oldest first.
    func parked(now: Date, shards: Set<Int>?) throws -> [ParkedBroadcast]
    /// Closes the positions of agents still marked here in `shards` (nil: every shard) at each
    /// shard's cursor: their sessions ended with a dispatcher that stopped, or lost the shard.
    func closePositions(shards: Set<Int>?) throws
    /// Notes that deliveries went out; the first send of each counts as delivered.
    func markSent(_ deliveries: [AgentDelivery], now: Date) throws
    /// Records acknowledgements, each an installation's and the ids it acknowledged; each delivery
    /// counts once, and only for the installation it was meant for. An acknowledged delivery is
    /// done: its row goes, and the outcome keeps the count. Returns how many were new.
    @discardableResult
    func acknowledge(_ acks: [(String, [DeliveryKey])], now: Date) throws -> Int
    /// Records deliveries the agent gave up on; each counts once as failed, never as acknowledged.
    func fail(_ failures: [DeliveryFailure], installationId: String, now: Date) throws
    /// Records what push services answered. A delivery a service took counts as delivered and
    /// acknowledged (Success); one it refused counts as failed, under the outcome name it maps to
    /// (ExpiredChannel, WrongToken and the like), with the service's words kept as the reason.
    func pushed(_ results: [(PushMessage, PushResult)], now: Date) throws
    /// Removes unacknowledged deliveries of `shards` (nil: every shard) past their expiry, counting
    /// them as expired; returns how many.
    func expire(now: Date, shards: Set<Int>?) throws -> Int
    /// Drops failed deliveries after a day, outcomes after a week, payloads once none of their
    /// deliveries is left, and dispatchers not seen for a day. It reads every delivery, so it runs rarely.
    func purge(now: Date) throws

    /// Installations of `shards` (nil: every shard) with deliveries to agents neither acknowledged
    /// nor expired: at start, whose agents must load from the store when they connect.
    func backlog(now: Date, shards: Set<Int>?) throws -> Set<String>
    /// Deliveries for an installation that are neither acknowledged nor expired, oldest first, and
    /// which of them were sent before (to an earlier session, or by another dispatcher).
    func unacknowledged(for installationId: String, now: Date, limit: Int) throws -> (deliveries: [AgentDelivery], sentBefore: Set<String>)
    /// Deliveries to phones and browsers of `shards` (nil: every shard) that no push service has
    /// taken yet, oldest first: at start, to hand to the push services again.
    func pendingPush(now: Date, limit: Int, shards: Set<Int>?) throws -> [PushMessage]
    /// Totals for metrics: deliveries waiting for an acknowledgement, and outcome counters.
    func totals() throws -> [String: String]
    /// A notification's outcome. It is `Processing` while a delivery to a push service waits for
    /// its service's answer (a retry) and has not expired, and `Completed` once every one has an
    /// answer; the agents' deliveries are counted as their acknowledgements come. With `scope`, nil
    /// for a notification of another hub.
    func outcome(_ notificationId: String, in scope: HubScope?, now: Date) throws -> NotificationOutcome?
    /// What became of each of a test send's first targets; nil when it is not a test send the store has.
    func testResults(_ notificationId: String) throws -> TestResults?
}

extension DeliveryStore {
    /// Records with one dispatcher, which plans every shard.
    func record(_ notification: AcceptedNotification, plans: [PlannedDelivery], sent: Set<DeliveryKey>, now: Date) throws {
        try record(notification, plans: plans, parked: ParkedCounts(), sent: sent, shards: nil, now: now)
    }

    func record(_ notification: AcceptedNotification, plans: [PlannedDelivery], sent: Set<DeliveryKey>, shards: Set<Int>?, now: Date) throws {
        try record(notification, plans: plans, parked: ParkedCounts(), sent: sent, shards: shards, now: now)
    }

    func backlog(now: Date) throws -> Set<String> { try backlog(now: now, shards: nil) }

    /// Records acknowledgements from `installationId` (see `acknowledge(_:now:)`).
    @discardableResult
    func acknowledge(_ deliveryIds: [String], installationId: String, now: Date) throws -> Int {
        try acknowledge([(installationId, deliveryIds.map { DeliveryKey($0) })], now: now)
    }

    func expire(now: Date) throws -> Int { try expire(now: now, shards: nil) }

    /// Deliveries for an installation that are neither acknowledged nor expired, oldest first.
    func pending(for installationId: String, now: Date, limit: Int = 500) throws -> [AgentDelivery] {
        try unacknowledged(for: installationId, now: now, limit: limit).deliveries
    }

    func outcome(_ notificationId: String, now: Date) throws -> NotificationOutcome? {
        try outcome(notificationId, in: nil, now: now)
    }

    func outcome(_ notificationId: String, in scope: HubScope? = nil) throws -> NotificationOutcome? {
        try outcome(notificationId, in: scope, now: Date())
    }

    func pendingPush(now: Date, limit: Int = 100_000) throws -> [PushMessage] {
        try pendingPush(now: now, limit: limit, shards: nil)
    }
}

/// A dispatcher's fencing tokens: the epoch at which it holds each of its shards' leases.
struct LeaseFence: Equatable, Sendable {
    var owner: String
    var epochs: [Int: UInt64]
}

/// A write touched shards whose leases its dispatcher no longer holds at the epoch it planned
/// under: it was rolled back whole, and those shards' work is another dispatcher's now.
struct LeaseLost: Error, CustomStringConvertible {
    var shards: Set<Int>
    var description: String { "the leases of shards \(shards.sorted().map(String.init).joined(separator: ",")) are no longer held" }
}
