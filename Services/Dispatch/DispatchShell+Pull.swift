import Bus
import DispatchCore
import Foundation
import HubProtocol
import ServiceKit
import Storage

/// Accepted notifications come from the publish service: carried whole on its stream, or pulled
/// after the cursor (`PullControl` decides when and how many), and planned a page at a time.
extension DispatchShell {
    /// Where the next pull starts: the stored cursor, or with shards the least of the owned shards'
    /// cursors (each shard then plans only what is past its own). Nil while no shard is held, and
    /// while the core's cursors go back to the store's after a failed write.
    func pullCursor() -> UInt64? {
        guard !writes.rewinding else { return nil }
        guard let shards = core.shards else {
            do {
                return try store.cursor()
            } catch {
                logger.error("cannot read the dispatcher's cursor", ("error", "\(error)"))
                return nil
            }
        }
        return shards.owned.map { shards.cursors[$0] ?? 0 }.min()
    }

    /// Notifications are planned against a copy of the registry known to be current: one taken, and
    /// followed by its stream since (a first snapshot taken before the subscription reached the
    /// registry would miss installations saved meanwhile, until the next heartbeat showed the gap).
    private var registryReady: Bool { registry?.position != nil && registry?.confirmed == true }

    /// Accepted notifications are pulled from the publish service after the stored cursor, one
    /// request in flight at a time and never waited on: the reply comes back through the loop.
    func pull() {
        guard let request = pulls.next(after: pullCursor(), registryReady: registryReady, inFlight: core.inFlightCount)
        else { return }
        let generation = pullGeneration
        publish.forward(request) { [self] result in
            // Sent before the store's last new session: its notifications may be of another history.
            guard generation == pullGeneration else { return }
            switch result {
            case .success(let batch):
                guard !batch.notifications.isEmpty else {
                    _ = pulls.answered(count: 0, planned: 0)
                    streamedMeanwhile()
                    return
                }
                let deliveries = plan(batch.notifications, after: request.after)
                planned.pulled += batch.notifications.count
                let more = pulls.answered(count: batch.notifications.count, planned: deliveries)
                if !streamedMeanwhile() && more { pull() }
            case .failure(let error):
                pulls.failed()
                logger.warning("pull from the publish service failed; trying again", ("error", error.message))
                streamedMeanwhile()
            }
        }
    }

    /// What came on the stream while a pull was on its way, planned once its reply is: those next
    /// after the cursor are planned from here, and only what they do not cover is pulled. Without
    /// it, a dispatcher that pulled once while sends kept coming would pull page after page.
    /// Returns false when nothing came meanwhile.
    @discardableResult
    private func streamedMeanwhile() -> Bool {
        let messages = pulls.takeKept()
        guard !messages.isEmpty else { return false }
        streamed(messages)
        return true
    }

    /// The publish service's stream says there is more past `latest`: only a hint, so a lost one
    /// costs a tick's delay, never a send.
    func hinted(latest: UInt64) {
        if PullControl.hinted(latest: latest, cursor: pullCursor()) { pull() }
    }

    /// Messages from the publish service's stream. Those that carry their notification whole, next
    /// after the cursor, are planned at once, as a pull's reply would be, which saves the pull's round
    /// trip; anything past them (a gap, a large notification, or all of them while a pull is on its
    /// way) is left to a pull. They are planned a page at a time, each page its own turn, up to
    /// `PullControl.streamedPages` pages, while the deliveries in flight stay below the limit; the
    /// stream is read as many at a time, so the rest waits on its socket, not pulled.
    func streamed(_ messages: [SequencedMessage]) {
        let messages = streamFloor == 0 ? messages : messages.filter { $0.isHeartbeat || $0.sequence > streamFloor }
        guard let latest = messages.map(\.sequence).max() else { return }
        // While a pull is on its way, kept for after its reply.
        guard !pulls.keep(messages) else { return }
        for _ in 0..<PullControl.streamedPages {
            guard pulls.takesStreamed(registryReady: registryReady, inFlight: core.inFlightCount), let cursor = pullCursor() else { break }
            let batch = PullControl.streamed(messages, after: cursor, limit: pulls.limit)
            guard !batch.isEmpty else { break }
            let deliveries = plan(batch, after: cursor)
            planned.streamed += batch.count
            pulls.adapt(count: batch.count, planned: deliveries)
        }
        hinted(latest: latest)
    }

    /// Plans notifications that hold everything after `after`, pulled or from the stream, with the
    /// registry's stream read first, and writes the turn; returns how many deliveries they planned.
    /// Shards taken over since `after` was read, and so behind it, are planned by a pull from their
    /// own cursor.
    private func plan(_ notifications: [AcceptedNotification], after: UInt64) -> Int {
        // Pulled again once the cursors have gone back.
        guard !writes.rewinding else { return 0 }
        FaultPoint.reach(.pulled)
        do { try readRegistry() } catch { logger.warning("registry stream", ("error", "\(error)")) }
        let before = core.counters.planned
        if let last = notifications.last?.sequence {
            plannedTo[HistoryNumbering.epoch(of: last), default: 0] = max(plannedTo[HistoryNumbering.epoch(of: last)] ?? 0, last)
        }
        handle(.accepted(notifications, after: after))
        commit()
        return core.counters.planned - before
    }
}
