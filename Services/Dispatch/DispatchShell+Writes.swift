import DispatchCore
import Foundation
import ServiceKit
import Storage

/// The write path's IO: the shell hands `WritePath` its events and carries out its directives,
/// one after another; a directive's own result (a write's end, the leases read) is handed back
/// as an event before the next directive runs.
extension DispatchShell {
    /// Writes the turn's work, now or (where turns wait for their group) once its group is due.
    func commit(now force: Bool = false) {
        carryOut(writes.on(.commit(force: force, moment)))
    }

    /// Commits the open group of writes, or writes the turns gathered, when `GroupCommitPolicy`
    /// says it is time: on a timer, and after each turn.
    func commitGroupIfDue() {
        carryOut(writes.on(.groupTimer(moment)))
    }

    /// Writes the turns gathered in memory, where the store's turns wait for their group, so that
    /// what the store is asked next sees them: before deliveries are loaded, push deliveries are
    /// resumed, or an outcome or a test send's results are read. Health's totals do not wait for
    /// it: they may trail by a group.
    func writeGathered() {
        carryOut(writes.on(.writeGathered(moment)))
    }

    /// The leases, each heartbeat: shards taken bring their waiting deliveries (agents' from the
    /// store when they say hello, push services' at once); shards lost move their agents.
    func keepLeases() {
        carryOut(writes.on(.leaseBeat))
        commit()
    }

    private var moment: WritePath.Moment {
        WritePath.Moment(now: .now, held: store.held, awaited: core.inFlightCount)
    }

    func carryOut(_ directives: [WritePath.Directive]) {
        for directive in directives {
            switch directive {
            case .write(let turn):
                write(turn)
            case .flushGroup(let pushes):
                do {
                    try store.flush()
                } catch {
                    logger.error("dispatch commit failed", ("error", "\(error)"), ("pushesPlannedAgain", pushes.count))
                    continue
                }
                submit(pushes)
            case .submit(let messages):
                submit(messages)
            case .reportFailure(let reason):
                logger.error("dispatch commit failed", ("error", reason))
            case .forgetLeases(let shards):
                leases.lost(shards)
                store.fence = leases.fence
            case .readLeases(let force):
                let change = leases.beat(now: Date(), force: force)
                store.fence = leases.fence
                carryOut(writes.on(.leasesRead(change, held: leases.owned, planned: core.shards?.cursors)))
            case .serve(let map):
                let before = core.shards?.owned
                handle(.shards(map))
                if before != map.owned { logger.info("shards", ("held", map.owned.count), ("gained", map.owned.subtracting(before ?? []).count)) }
            case .loadBacklog(let shards):
                do {
                    // Agents its last owner had here left with it, at the shards' cursors.
                    try store.closePositions(shards: shards)
                    handle(.parked(try store.parked(now: Date(), shards: shards), cursor: nil))
                    handle(.backlog(try store.backlog(now: Date(), shards: shards)))
                    submit(try store.pendingPush(now: Date(), limit: PushResume.page, shards: shards))
                } catch {
                    logger.error("cannot load the waiting deliveries of shards taken", ("error", "\(error)"))
                }
            case .pull:
                pull()
            case .forgetPull:
                pulls.failed()
                _ = pulls.takeKept()
                pullGeneration += 1
            case .renewCore:
                handle(.storeRenewed)
            case .then(let event):
                carryOut(writes.on(event))
            }
        }
    }

    /// Writes one turn in one transaction (on SQLite a savepoint of the open group of writes),
    /// and hands its end to the write path.
    private func write(_ turn: DispatchTurn) {
        let now = Date()
        let failure: WritePath.Failure
        do {
            try store.writeTurn {
                try turn.write(to: store, now: now)
                FaultPoint.reach(.write)
            }
            FaultPoint.reach(.committed)
            return carryOut(writes.on(.written(moment)))
        } catch let lost as LeaseLost {
            logger.warning("another dispatcher holds shards this turn wrote for; their work is dropped", ("shards", lost.shards.count))
            failure = .leaseLost(lost.shards)
        } catch is StoreSessionChanged {
            failure = .sessionChanged
        } catch {
            failure = .failed("\(error)")
        }
        carryOut(writes.on(.writeFailed(failure)))
    }

    /// The store was reached in a new session (after a lost connection, or on a server that failed
    /// over): positions in memory are not trusted across it. The records of turns not written yet
    /// are dropped, a pull on its way is forgotten, the cursors go back to the store's (which, kept
    /// in the same database as the publish service's log, are never past what the log holds), every
    /// session loads its deliveries again from the store, and what the store has for push services
    /// is handed to them again. What was planned past the store's cursors is planned again, and the
    /// agents show each notification once. After a failover, what the publish service's stream
    /// carried of the old history is left to pulls from the new one, and the error line names what
    /// the old history had that the new one lost.
    func storeSessions() {
        guard shared else { return }
        /// `planned`: how far this dispatcher had planned, for the log line.
        func again(planned: UInt64) -> [(String, CustomStringConvertible)] {
            carryOut(writes.on(.storeRenewed(moment)))
            let from = pullCursor().map(String.init) ?? "the store's cursors once the leases are read"
            return [("plannedTo", planned), ("plannedAgainAfter", from)]
        }
        history.check(renewed: { _ in again(planned: plannedTo.values.max() ?? 0) }) { _, to in
            streamFloor = max(streamFloor, to.base)
            // How far the older histories were planned: the new one's numbers are above it (and
            // some of them may have been planned in memory already).
            let before = plannedTo.filter { $0.key < to.epoch }.values.max() ?? 0
            var fields = again(planned: before)
            do {
                if let lost = try history.lost(upTo: before, of: "publish.stream", latest: .max) {
                    fields.append(("lost", "publish numbers \(StoreHistoryWatch.describe(lost)), planned before the failover and absent now"))
                }
            } catch {
                fields.append(("lost", "unknown: the new history's marks cannot be read (\(error))"))
            }
            fields.append(("next", "new sends are numbered from \(to.base + 1)"))
            return fields
        }
    }
}
