import DispatchCore
import Foundation
import Push

/// The dispatcher's write path as a value: it gathers what the turns decide, says when a turn is
/// written and what follows a write that stood or failed, and how the leases read at each
/// heartbeat, or after a fenced write, change what this dispatcher serves. It takes events and
/// returns what to do; `DispatchShell` carries the directives out, one after another, and reports
/// each write's end and each reading of the leases as an event of its own. It does no IO and reads
/// no clock: the moments it needs come with the events.
///
/// The two engines commit differently, and one `CommitStrategy` says how. On SQLite each turn is
/// written at once, as a savepoint of a group of writes left open, and the group commits when
/// `GroupCommitPolicy` says (every 50 ms to 2 s). On PostgreSQL the turns are gathered here, in
/// memory, and written as one when their group is due, or at once when something is about to read
/// the store (`writeGathered`); no transaction stays open meanwhile. A turn's writes stand or fall
/// together, and losing the last of them to a crash loses nothing: the cursor then points back
/// into the publish service's durable log, the notifications are planned again, lost
/// acknowledgements make their deliveries go out again, and agents show each once.
///
/// On a shared store a write is fenced by this dispatcher's leases: when another dispatcher has
/// taken one of the shards written for (`LeaseLost`), the leases are read again and the turn is
/// written once more without the lost shards' work, which is the new owner's. A write that fails
/// otherwise keeps what is written the same however often (sends, acknowledgements, failures, push
/// answers) for the next turn, and its records are planned again: on a shared store once the
/// core's cursors have gone back to the store's, at the next reading of the leases that succeeds
/// (`rewinding`).
struct WritePath {
    /// The moment of an event, with the figures the group's timing depends on.
    struct Moment {
        var now: ContinuousClock.Instant
        /// Deliveries the store holds in memory until its group commits (`DeliveryStore.held`).
        var held: Int = 0
        /// Deliveries sent whose acknowledgement has not come (`Dispatcher.inFlightCount`).
        var awaited: Int = 0
    }

    /// How a write ended, when it did not stand.
    enum Failure: Equatable {
        /// Another dispatcher holds these shards now: the write was rolled back whole.
        case leaseLost(Set<Int>)
        /// The store is on a session the dispatcher has not acted on: nothing was written.
        case sessionChanged
        case failed(String)
    }

    enum Event {
        /// A turn's work is gathered (`turn`): it is written now, or, where turns wait for their
        /// group, once the group is due (at once with `force`).
        case commit(force: Bool, Moment)
        /// Something is about to read the store: turns gathered in memory are written first.
        case writeGathered(Moment)
        /// The group's timer: the open group commits (SQLite), or the gathered turns are written, when due.
        case groupTimer(Moment)
        /// The last `.write` stood.
        case written(Moment)
        case writeFailed(Failure)
        /// The heartbeat's reading of the leases is due.
        case leaseBeat
        /// A write outside the turns (expiry) found shards another dispatcher holds now.
        case leasesLost(Set<Int>)
        /// The leases were read (`.readLeases`): what changed (nil: nothing, or they could not be
        /// read), the shards held now, and the core's cursors per shard as it planned them.
        case leasesRead(ShardLeaseKeeper.Change?, held: Set<Int>, planned: [Int: UInt64]?)
        /// The store was reached in a new session (a lost connection, or a failover): what was
        /// planned is not trusted across it.
        case storeRenewed(Moment)
        /// What follows a new session's write: the pull and the core start again from the store.
        case renewalWritten
    }

    enum Directive {
        /// Write this turn, as of now, in one transaction (`DeliveryStore.writeTurn`), and report
        /// `.written` or `.writeFailed`.
        case write(DispatchTurn)
        /// Commit the open group of writes (`DeliveryStore.flush`); once it stands, hand these to the
        /// push services. When it fails the group is rolled back whole, their rows with it, and
        /// their notifications are planned again: they are not handed over.
        case flushGroup(thenSubmit: [PushMessage])
        /// Hand these to the push services: their deliveries are in the store now.
        case submit([PushMessage])
        /// Log that a write failed, and why.
        case reportFailure(String)
        /// Forget these shards (another dispatcher holds them now) and fence writes without them.
        case forgetLeases(Set<Int>)
        /// Read the leases (`ShardLeaseKeeper.beat`), fence the store's writes by them, and report `.leasesRead`.
        case readLeases(force: Bool)
        /// Serve these shards, from these cursors (`DispatchEvent.shards`).
        case serve(ShardMap)
        /// Load the waiting deliveries of shards taken: agents' from the store, push services' now.
        case loadBacklog(Set<Int>)
        /// Pull from the publish service (shards taken are behind the others).
        case pull
        /// A pull on its way answers from the old session: forget it and what the stream kept for it.
        case forgetPull
        /// The core forgets its sessions' deliveries, to load them again (`DispatchEvent.storeRenewed`).
        case renewCore
        /// Hand this event back once the directives before it are carried out.
        case then(Event)
    }

    private enum Phase {
        case idle
        /// A `.write` is out; `fenced`: it is the turn written again after a fenced write.
        case writing(DispatchTurn, fenced: Bool)
        /// A fenced write waits for the leases to be read, to be written again without the lost shards.
        case refencing(DispatchTurn)
    }

    let commits: CommitStrategy
    /// Whether dispatchers share the store, each serving the shards it holds leases on.
    let shared: Bool
    /// What the turns decided since the last write.
    var turn = DispatchTurn()
    private var groups: GroupCommitPolicy
    private var phase = Phase.idle
    /// A write failed and its records were dropped, on a shared store: nothing is planned until the
    /// core's cursors have gone back to the store's, at the next reading of the leases that succeeds.
    private(set) var rewinding = false
    /// Every shard's waiting deliveries are read again at the next reading of the leases that succeeds.
    private(set) var reloading = false

    init(commits: CommitStrategy, shared: Bool, now: ContinuousClock.Instant) {
        self.commits = commits
        self.shared = shared
        groups = GroupCommitPolicy(now: now)
    }

    /// Whether a write is out, or waits for the leases to go again.
    var isWriting: Bool {
        if case .idle = phase { return false }
        return true
    }

    mutating func on(_ event: Event) -> [Directive] {
        switch event {
        case .commit(let force, let moment):
            return commit(force: force, moment)
        case .writeGathered(let moment):
            guard commits.gathersTurns, !isWriting else { return [] }
            return commit(force: true, moment)
        case .groupTimer(let moment):
            if commits.gathersTurns { return commit(force: false, moment) }
            return flushIfDue(moment, thenSubmit: [])
        case .written(let moment):
            guard case .writing(let pending, _) = phase else { return [] }
            phase = .idle
            if commits.gathersTurns {
                groups.committed(at: moment.now)
            } else if case let flush = flushIfDue(moment, thenSubmit: pending.pushes), !flush.isEmpty {
                return flush
            }
            return pending.pushes.isEmpty ? [] : [.submit(pending.pushes)]
        case .writeFailed(let failure):
            return failed(failure)
        case .leaseBeat:
            return shared ? [.readLeases(force: rewinding || reloading)] : []
        case .leasesLost(let shards):
            return [.forgetLeases(shards), .readLeases(force: true)]
        case .leasesRead(let change, let held, let planned):
            let (directives, gained) = change.map { serve($0, planned: planned) } ?? ([], [])
            if case .refencing(var pending) = phase {
                // A shard taken again at a new epoch starts from the store: its work is dropped too.
                pending.keep(shards: held.subtracting(gained))
                phase = .writing(pending, fenced: true)
                return directives + [.write(pending)]
            }
            return directives
        case .storeRenewed(let moment):
            guard shared else { return [] }
            // The records of turns not written yet are dropped; what is written the same however
            // often goes in now, before the store is read again: a push answer left unwritten would
            // hand its delivery to the push service again.
            let dropped = turn
            turn = DispatchTurn()
            turn.retry(dropped)
            return commit(force: true, moment) + [.then(.renewalWritten)]
        case .renewalWritten:
            rewinding = true
            reloading = true
            return [.forgetPull, .renewCore, .readLeases(force: true)]
        }
    }

    private mutating func commit(force: Bool, _ moment: Moment) -> [Directive] {
        guard !isWriting else { return [] }
        guard !turn.isEmpty else {
            if commits.gathersTurns { groups.committed(at: moment.now) }
            return []
        }
        if commits.gathersTurns, !force, !groups.writes(gathered: turn, at: moment.now, awaited: moment.awaited) { return [] }
        let pending = turn
        turn = DispatchTurn()
        phase = .writing(pending, fenced: false)
        return [.write(pending)]
    }

    private mutating func flushIfDue(_ moment: Moment, thenSubmit pushes: [PushMessage]) -> [Directive] {
        guard groups.due(at: moment.now, held: moment.held, awaited: moment.awaited) else { return [] }
        groups.committed(at: moment.now)
        return [.flushGroup(thenSubmit: pushes)]
    }

    private mutating func failed(_ failure: Failure) -> [Directive] {
        guard case .writing(let pending, let fenced) = phase else { return [] }
        switch failure {
        case .leaseLost(let shards) where !fenced:
            phase = .refencing(pending)
            return [.forgetLeases(shards), .readLeases(force: true)]
        case .sessionChanged:
            // Nothing was written: the records are planned again once the cursors are read again
            // (`storeRenewed`, at the next tick); what is written the same however often is kept.
            phase = .idle
            turn.retry(pending)
            return []
        case .leaseLost(let shards):
            phase = .idle
            turn.retry(pending)
            return failedOtherwise(LeaseLost(shards: shards).description)
        case .failed(let reason):
            phase = .idle
            turn.retry(pending)
            return failedOtherwise(reason)
        }
    }

    private mutating func failedOtherwise(_ reason: String) -> [Directive] {
        guard shared else { return [.reportFailure(reason)] }
        rewinding = true
        return [.reportFailure(reason), .readLeases(force: true)]
    }

    /// After a failed write (`rewinding`) the core's cursors go back to the store's, and what it
    /// had planned past them is planned again. Otherwise a shard held on at the same epoch keeps
    /// the core's cursor where it is ahead of the store's (turns gathered in memory, not written
    /// yet); work gathered for a shard taken at a new epoch is dropped, as a fenced write drops it,
    /// since the shard starts again from the store's cursor.
    /// Also returns the shards gained (taken, taken again at a new epoch, or reloaded).
    private mutating func serve(_ read: ShardLeaseKeeper.Change, planned: [Int: UInt64]?) -> ([Directive], Set<Int>) {
        var change = read
        if reloading {
            reloading = false
            change.gained = change.map.owned
        }
        if rewinding {
            rewinding = false
        } else if let planned {
            change.map.cursors = ShardMap.keeping(planned, over: change.map.cursors, except: change.gained)
            if !change.gained.isEmpty, !turn.isEmpty { turn.keep(shards: change.map.owned.subtracting(change.gained)) }
        }
        guard !change.gained.isEmpty else { return ([.serve(change.map)], []) }
        return ([.serve(change.map), .loadBacklog(change.gained), .pull], change.gained)
    }
}
