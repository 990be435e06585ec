import Bus
import Foundation
import Testing

@testable import ServiceKit

/// A store's change log published as a stream: in order, a page at a time, each change once.
@Suite("Change log")
struct ChangeLogTests {
    @Test("what the log holds beyond the stream is published in order, in pages, and nothing twice")
    func publishes() throws {
        let endpoint = "inproc://changelog-\(UUID().uuidString)"
        let events = try SequencedPublisher(bind: [endpoint], startingAfter: 2)
        defer { events.close() }
        let subscriber = try ZMQContext.shared.socket(.sub)
        defer { subscriber.close() }
        try subscriber.subscribe()
        try subscriber.connect(endpoint)
        var log: [UInt64] = Array(3...7)
        var reads: [(UInt64, Int)] = []
        let changes = ChangeLog(
            events, topic: "t", page: 2, read: { after, limit in
                reads.append((after, limit))
                return Array(log.filter { $0 > after }.prefix(limit))
            }, sequence: { $0 }, body: { Data(String($0).utf8) })
        // A SUB socket joins a moment after it connects: wait until the first message arrives.
        var received: [SequencedMessage] = []
        let deadline = Date().addingTimeInterval(5)
        while received.isEmpty, Date() < deadline {
            try changes.publish()
            while let frames = try subscriber.receive(wait: false) { received.append(try SequencedMessage(frames: frames)) }
            if received.isEmpty { Thread.sleep(forTimeInterval: 0.01) }
        }
        #expect(events.sequence == 7)
        #expect(reads.map(\.0).prefix(3) == [2, 4, 6], "pages of two after what was published")
        log.append(8)
        try changes.publish()
        try changes.publish()
        Thread.sleep(forTimeInterval: 0.05)
        while let frames = try subscriber.receive(wait: false) { received.append(try SequencedMessage(frames: frames)) }
        let sequences = received.map(\.sequence)
        #expect(sequences.last == 8 && sequences == sequences.sorted() && Set(sequences).count == sequences.count)
        #expect(events.sequence == 8)
    }
}
