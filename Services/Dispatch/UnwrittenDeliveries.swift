import DispatchCore
import Foundation

/// Deliveries to agents recorded inside an open group of writes (SQLite), held in memory instead
/// of written at once. A delivery acknowledged before its group commits is never written: in a
/// healthy fan-out most are, so their rows, and their index entries, cost nothing. The rest are
/// written just before the group commits, or before any statement that reads or sweeps deliveries,
/// in the order they were recorded.
///
/// This loses nothing a crash would not: a group stands or falls whole, and the cursor it moves is
/// in it. A crash before the commit loses the deliveries and the cursor's move together, and the
/// notifications are planned again from the publish service's log, as when their rows were lost.
///
/// Changes made inside a turn's write are journaled, so that a write that fails takes its changes
/// to the held deliveries with it (`mark`, `revert(to:)`, `settle`).
struct UnwrittenDeliveries {
    /// What a row needs, besides the delivery id it is held under.
    struct Delivery: Equatable {
        var notificationId: String
        var installationId: String
        var shard: Int
        var template: String?
        var payloadId: Int64
        var expiresAt: Date
        var rich: Data?
        var deliveredAt: Date?
    }

    private var held: [DeliveryKey: Delivery] = [:]
    /// Delivery ids in the order they were recorded. An id no longer held is skipped, and left in
    /// place until the list is compacted after a write stands, so that undoing a write needs no
    /// reordering.
    private var order: [DeliveryKey] = []
    /// Each change's delivery id and what it held before, since the outermost write began.
    private var journal: [(DeliveryKey, Delivery?)] = []

    var count: Int { held.count }
    var isEmpty: Bool { held.isEmpty }

    subscript(deliveryId: DeliveryKey) -> Delivery? { held[deliveryId] }

    // Each change below looks its delivery id up once: these run once or twice per delivery.

    /// Holds a delivery recorded in the open group.
    mutating func add(_ deliveryId: DeliveryKey, _ delivery: Delivery) {
        journal.append((deliveryId, held.updateValue(delivery, forKey: deliveryId)))
        order.append(deliveryId)
    }

    /// Notes its first send; false when it was sent before or is not held.
    mutating func markSent(_ deliveryId: DeliveryKey, at time: Date) -> Bool {
        guard let index = held.index(forKey: deliveryId), held.values[index].deliveredAt == nil else { return false }
        journal.append((deliveryId, held.values[index]))
        held.values[index].deliveredAt = time
        return true
    }

    /// Lets go of a delivery held for `installationId`, acknowledged or handed on; returns it.
    mutating func remove(_ deliveryId: DeliveryKey, installationId: String) -> Delivery? {
        guard let index = held.index(forKey: deliveryId), held.values[index].installationId == installationId else { return nil }
        let delivery = held.remove(at: index).value
        journal.append((deliveryId, delivery))
        return delivery
    }

    /// Lets go of every delivery past its expiry at `now`; returns them.
    mutating func removeExpired(at now: Date) -> [(String, Delivery)] {
        let expired = held.filter { $0.value.expiresAt <= now }
        for id in expired.keys { set(id, nil) }
        return expired.map { ($0.key.id, $0.value) }
    }

    /// Every delivery held, oldest first, and none held after.
    mutating func takeAll() -> [(String, Delivery)] {
        var taken: [(String, Delivery)] = []
        taken.reserveCapacity(held.count)
        for id in order {
            guard let delivery = held[id] else { continue }
            taken.append((id.id, delivery))
            set(id, nil)
        }
        return taken
    }

    /// Where the journal stands: a write that fails reverts to it.
    var mark: Int { journal.count }

    /// Undoes every change since `mark`, newest first.
    mutating func revert(to mark: Int) {
        while journal.count > mark {
            let (id, before) = journal.removeLast()
            held[id] = before
        }
    }

    /// The outermost write committed: its changes stand, and need no undoing. Ids no longer held
    /// leave the order once they are most of it.
    mutating func settle() {
        journal.removeAll(keepingCapacity: true)
        if order.count > 2 * held.count + 1_024 { order.removeAll { held[$0] == nil } }
    }

    private mutating func set(_ deliveryId: DeliveryKey, _ delivery: Delivery?) {
        journal.append((deliveryId, held[deliveryId]))
        held[deliveryId] = delivery
    }
}
