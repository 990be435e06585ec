import Foundation

/// Deliveries waiting for their resend time, in buckets of a tenth of a second. An
/// acknowledgement takes its delivery out of its bucket in O(1), so the queue only ever holds
/// deliveries still in flight: a broadcast to many agents, all acknowledged, leaves nothing behind
/// to sift through when its resend time comes. The bucket times are kept in a small heap.
/// Deliveries are named by `ID`: the dispatcher's by `DeliveryKey`, a push queue's by id.
public struct DueQueue<ID: Hashable> {
    private var buckets: [Bucket: Set<ID>] = [:]
    private var times: [Bucket] = []
    /// The most deliveries a bucket has held lately: a new bucket starts with room for as many,
    /// so that a broadcast's bucket is not grown (and every id in it hashed again) step by step.
    private var typical = 0

    public init() {}

    /// Queues `id` for `due` and returns its bucket, for `remove`.
    @discardableResult
    public mutating func push(due: Date, id: ID) -> Bucket {
        let bucket = Bucket((due.timeIntervalSince1970 * 10).rounded(.up))
        let count: Int? = {
            guard let index = buckets.index(forKey: bucket) else { return nil }
            guard buckets.values[index].insert(id).inserted else { return 0 }
            return buckets.values[index].count
        }()
        switch count {
        case nil:
            var ids = Set<ID>(minimumCapacity: typical)
            ids.insert(id)
            buckets[bucket] = ids
            pushTime(bucket)
        case let count?:
            typical = max(typical, count)
        }
        return bucket
    }

    public mutating func remove(_ id: ID, from bucket: Bucket) {
        buckets[bucket]?.remove(id)
    }

    /// Takes up to `limit` deliveries that are due by `now`, earliest bucket first.
    public mutating func popDue(now: Date, limit: Int) -> [ID] {
        let current = Bucket((now.timeIntervalSince1970 * 10).rounded(.down))
        var due: [ID] = []
        while due.count < limit, let first = times.first, first <= current {
            var ids = buckets[first] ?? []
            while due.count < limit, let id = ids.popFirst() { due.append(id) }
            if ids.isEmpty {
                buckets[first] = nil
                popTime()
                // Lately: the figure decays as buckets go by, so one large broadcast is not reserved for ever.
                typical -= typical / 8
            } else {
                buckets[first] = ids
            }
        }
        return due
    }

    private mutating func pushTime(_ time: Bucket) {
        times.append(time)
        var child = times.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard times[child] < times[parent] else { break }
            times.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func popTime() {
        let last = times.removeLast()
        guard !times.isEmpty else { return }
        times[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < times.count && times[left] < times[smallest] { smallest = left }
            if right < times.count && times[right] < times[smallest] { smallest = right }
            if smallest == parent { break }
            times.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

extension DueQueue {
    /// A bucket: the tenth of a second (since 1970) at or after which its deliveries are due.
    public typealias Bucket = Int64
}
