import Foundation

/// Resends waiting for their time: a binary min-heap on due time. Entries are never removed
/// early; one whose delivery was acknowledged meanwhile is skipped when it comes up, which keeps
/// an acknowledgement O(1) and a resend O(log n).
struct DueQueue {
    struct Entry {
        let due: Date
        let id: String
        let attempt: Int
    }

    private var heap: [Entry] = []

    var count: Int { heap.count }

    mutating func push(due: Date, id: String, attempt: Int) {
        heap.append(Entry(due: due, id: id, attempt: attempt))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].due < heap[parent].due else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    /// The earliest entry if it is due by `now`.
    mutating func popDue(now: Date) -> Entry? {
        guard let first = heap.first, first.due <= now else { return nil }
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1, right = left + 1
                var smallest = parent
                if left < heap.count && heap[left].due < heap[smallest].due { smallest = left }
                if right < heap.count && heap[right].due < heap[smallest].due { smallest = right }
                if smallest == parent { break }
                heap.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return first
    }
}
