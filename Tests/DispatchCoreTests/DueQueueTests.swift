import Foundation
import Testing

@testable import DispatchCore

@Suite("Resend queue")
struct DueQueueTests {
    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    @Test("due deliveries come out earliest bucket first, at most the limit; removed ones never; a bucket emptied by removals is passed over")
    func order() {
        var queue = DueQueue<String>()
        let late = queue.push(due: Self.start.addingTimeInterval(2), id: "late")
        var early: [DueQueue<String>.Bucket] = []
        for index in 0..<300 { early.append(queue.push(due: Self.start.addingTimeInterval(1), id: "e\(index)")) }
        #expect(Set(early).count == 1 && early[0] < late)
        for index in stride(from: 0, to: 300, by: 2) { queue.remove("e\(index)", from: early[0]) }
        #expect(queue.popDue(now: Self.start, limit: 1_000).isEmpty, "nothing is due yet")
        let first = queue.popDue(now: Self.start.addingTimeInterval(1), limit: 100)
        let rest = queue.popDue(now: Self.start.addingTimeInterval(3), limit: 1_000)
        #expect(first.count == 100 && rest.count == 51 && rest.last == "late")
        #expect(Set(first + rest.dropLast()) == Set(stride(from: 1, to: 300, by: 2).map { "e\($0)" }))
        // A bucket whose every delivery was acknowledged, then used again, still comes due once.
        let bucket = queue.push(due: Self.start.addingTimeInterval(5), id: "a")
        queue.remove("a", from: bucket)
        queue.push(due: Self.start.addingTimeInterval(5), id: "b")
        queue.push(due: Self.start.addingTimeInterval(5), id: "b")
        #expect(queue.popDue(now: Self.start.addingTimeInterval(6), limit: 10) == ["b"])
        #expect(queue.popDue(now: Self.start.addingTimeInterval(60), limit: 10).isEmpty)
    }
}
