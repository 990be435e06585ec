import Bus
import Foundation
import HubProtocol

/// Pulling accepted notifications from the publish service: one request in flight at a time, and
/// a page size that adapts so that one turn stays short. Plain logic; the shell sends the requests.
struct PullControl: Equatable {
    /// The most notifications one pull asks for, and the deliveries one pulled page should plan at most.
    static let maxPage = 100
    static let deliveriesPerPage = 10_000
    /// Deliveries in flight to agents at or past which nothing more is pulled: planning further
    /// ahead of the agents only queues in memory, and leaves the store fewer deliveries it can keep
    /// from writing (those acknowledged before their group of writes commits).
    static let inFlightLimit = 5_000
    /// The most pages of notifications that came whole on the stream planned at once, one turn
    /// each, before the loop serves its other sockets. The stream is read as many messages at a
    /// time, so what comes faster waits on its socket for the loop's next pass; only what the
    /// pages did not take (with pages made smaller for large fan-outs) is pulled.
    static let streamedPages = 8
    /// The most messages of the stream kept while a pull is on its way, to plan after its reply.
    static let heldStreamLimit = 2_000

    private(set) var pulling = false
    private(set) var limit = PullControl.maxPage
    /// Messages of the stream that came while a pull was on its way, for after its reply.
    private(set) var kept: [SequencedMessage] = []
    /// A pull was held back for the deliveries in flight; it goes once they fall below the limit.
    private(set) var heldBack = false

    /// The request to send now, or nil: one is on its way, the registry is not read yet, no cursor
    /// is known, or `inFlight` deliveries are at the limit.
    mutating func next(after cursor: UInt64?, registryReady: Bool, inFlight: Int = 0) -> PendingNotificationsRequest? {
        guard !pulling, registryReady, let cursor else { return nil }
        heldBack = inFlight >= Self.inFlightLimit
        guard !heldBack else { return nil }
        pulling = true
        return PendingNotificationsRequest(after: cursor, limit: limit)
    }

    /// Whether notifications that came whole on the publish service's stream may be planned now,
    /// without a pull: none is on its way (its reply plans them), the registry is read, and the
    /// deliveries in flight are below the limit (else the pull that follows is held back).
    func takesStreamed(registryReady: Bool, inFlight: Int) -> Bool {
        !pulling && registryReady && inFlight < Self.inFlightLimit
    }

    /// The notifications of `messages` to plan after `cursor`: those carried whole, in sequence
    /// from `cursor + 1` on, up to the first that is missing or carries only its id, and at most
    /// `limit` (a page, as a pull would take). What follows is pulled.
    static func streamed(_ messages: [SequencedMessage], after cursor: UInt64, limit: Int = maxPage) -> [AcceptedNotification] {
        var batch: [AcceptedNotification] = []
        for message in messages where !message.isHeartbeat && message.sequence > cursor {
            guard batch.count < limit, message.sequence == cursor + UInt64(batch.count) + 1,
                let notification = NotificationStream.notification(in: message.body, sequence: message.sequence)
            else { break }
            batch.append(notification)
        }
        return batch
    }

    /// Keeps messages of the stream that came while a pull is on its way, up to `heldStreamLimit`
    /// (past it, the pull that follows the reply takes the rest); false, keeping nothing, when no
    /// pull is on its way.
    mutating func keep(_ messages: [SequencedMessage]) -> Bool {
        guard pulling else { return false }
        kept += messages.prefix(max(0, Self.heldStreamLimit - kept.count))
        return true
    }

    /// What was kept while the pull was on its way, once its reply (or failure) has come: to be
    /// planned as if it came now.
    mutating func takeKept() -> [SequencedMessage] {
        defer { kept = [] }
        return kept
    }

    /// Whether a pull held back may go now that `inFlight` deliveries are in flight.
    func resumes(inFlight: Int) -> Bool { heldBack && inFlight < Self.inFlightLimit }

    /// A page came back with `count` notifications that planned `planned` deliveries; true when
    /// another pull should follow at once. Large fan-outs come a few notifications at a time.
    mutating func answered(count: Int, planned: Int) -> Bool {
        pulling = false
        guard count > 0 else { return false }
        adapt(count: count, planned: planned)
        return true
    }

    /// `count` notifications planned `planned` deliveries: the next page takes as many as keep it
    /// near `deliveriesPerPage`, whether it is pulled or comes on the stream.
    mutating func adapt(count: Int, planned: Int) {
        guard count > 0 else { return }
        let perNotification = planned / count
        limit = max(1, min(Self.maxPage, Self.deliveriesPerPage / max(1, perNotification)))
    }

    /// The pull failed; the next tick or hint tries again.
    mutating func failed() { pulling = false }

    /// A hint on the publish service's stream says there is more past `latest`.
    static func hinted(latest: UInt64, cursor: UInt64?) -> Bool {
        guard let cursor else { return false }
        return latest > cursor
    }
}
