import Foundation
import HubProtocol

/// What an engine's store keeps in memory for the bookkeeping `DeliveryEngine` shares, between
/// writes. What a write changes is gathered in its own `WriteScope`, and comes here only once the
/// write has committed (`settle`): a write that fails leaves nothing to take back but its changes
/// to the held deliveries, which are journaled.
final class DeliveryLedger {
    /// Test sends whose targets' results are still kept; every other notification's acks skip them.
    var testNotifications: Set<String> = []
    var fence: LeaseFence?
    /// Deliveries to agents recorded in the open group of writes and not written yet.
    var unwritten = UnwrittenDeliveries()
    /// The one dispatcher's cursor as last read or moved: a notification past it was never recorded.
    var knownCursor: UInt64?
    /// Deliveries acknowledged while held, so never written, since the store opened.
    var acknowledgedUnwritten = 0
    /// The payload rows of parked broadcasts' bodies made for agents catching up, forgotten when
    /// payloads are purged or a group of writes is rolled back.
    var owedPayloads: [OwedPayload: Int64] = [:]
    /// The write under way, if any: a write inside it joins it.
    var open: WriteScope?
    let encoder = HubCodec.makeEncoder()
    let decoder = HubCodec.makeDecoder()

    /// What the write under way has gathered. Only inside a write.
    var scope: WriteScope {
        get { open! }
        _modify { yield &open! }
    }

    /// Takes in what a write that committed changed.
    func settle(_ scope: WriteScope) {
        if let moved = scope.knownCursor { knownCursor = moved }
        acknowledgedUnwritten += scope.acknowledgedUnwritten
        if owedPayloads.count > 10_000 { owedPayloads.removeAll() }
        owedPayloads.merge(scope.owedPayloads) { $1 }
        unwritten.settle()
    }
}

/// What one write gathers as it runs, written as it ends (the cursors' moves, the outcome counts,
/// the fence's check) and taken in by the ledger once it commits; dropped whole when it fails.
struct WriteScope {
    var tally = OutcomeTally()
    /// The shards the write wrote for, where it is fenced.
    var touched: Set<Int> = []
    /// The one dispatcher's cursor as the write has moved it (from the ledger's as it began).
    var knownCursor: UInt64?
    /// The shards' cursors as read in this write, and moved by it: a notification past its shard's
    /// cursor was never recorded for that shard's installations. Read again by each write, since
    /// other dispatchers move the cursors of their shards.
    var shardCursors: [Int: UInt64]?
    /// Where the write moves the one dispatcher's cursor, and the shards' cursors: each moved once,
    /// as the write ends, however many notifications it recorded.
    var cursorTo: UInt64?
    var shardCursorsTo: [Int: UInt64] = [:]
    /// Deliveries acknowledged while held in this write.
    var acknowledgedUnwritten = 0
    /// Payload rows this write made for parked broadcasts' bodies.
    var owedPayloads: [OwedPayload: Int64] = [:]
    /// Where the held deliveries' journal stood as the write began.
    let mark: Int

    init(mark: Int, knownCursor: UInt64?) {
        self.mark = mark
        self.knownCursor = knownCursor
    }
}

/// A parked broadcast's body as rendered for an agent catching up.
struct OwedPayload: Hashable {
    var notificationId: String
    var body: String
}

/// How an engine commits the dispatcher's turns, one value per engine: read by the store's shared
/// behaviour (`DeliveryEngine`) and by the write path (`WritePath`).
struct CommitStrategy: Equatable, Sendable {
    /// Whether the dispatcher keeps its turns in memory until their group is due, and then writes
    /// them together as one turn (PostgreSQL, where a transaction left open across turns would hold
    /// locks other dispatchers wait on); else each turn is written at once into the open group of
    /// writes, which commits when due (SQLite). Either way a delivery acknowledged before its
    /// group is written is never written.
    var gathersTurns: Bool
    /// Agents' deliveries inserted, or acknowledged ones removed, in one statement: 1 where each
    /// statement runs in process (SQLite); many where each is a round trip to a server.
    var rowsPerStatement: Int

    var batchesRows: Bool { rowsPerStatement > 1 }

    /// SQLite: a group of writes left open across turns, each turn a savepoint of it.
    static let openGroup = CommitStrategy(gathersTurns: false, rowsPerStatement: 1)
    /// PostgreSQL: turns gathered in memory, a group written as one transaction, 2,000 rows a statement.
    static let gatheredTurns = CommitStrategy(gathersTurns: true, rowsPerStatement: 2_000)
}
