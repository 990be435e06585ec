import Foundation
@testable import HubProtocol
import Synchronization
import Testing

@Suite("Random ids")
struct RandomIDTests {
    @Test("a time-ordered id is a lowercase version 7 UUID holding its millisecond; later ones sort later, and a thousand are all different")
    func versionSevenOrdered() throws {
        var seen = Set<String>()
        var previous = (id: "", milliseconds: UInt64(0))
        let start = Date(timeIntervalSince1970: 1_780_000_000.123)
        for step in 0..<1_000 {
            let date = start.addingTimeInterval(Double(step) / 2_000)  // about two ids in each millisecond
            let id = RandomID.timeOrdered(at: date)
            let uuid = try #require(UUID(uuidString: id), "\(id)")
            #expect(id == uuid.uuidString.lowercased())
            let bytes = withUnsafeBytes(of: uuid.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 7, "\(id): version")
            #expect(bytes[8] >> 6 == 0b10, "\(id): variant")
            let milliseconds = bytes[0..<6].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            #expect(milliseconds == UInt64((date.timeIntervalSince1970 * 1_000).rounded(.down)), "\(id): time")
            if milliseconds > previous.milliseconds { #expect(id > previous.id, "\(id) sorts after \(previous.id)") }
            previous = (id, milliseconds)
            seen.insert(id)
        }
        #expect(seen.count == 1_000)
        // The 74 bits beside the time are random: ids of one millisecond differ.
        let sameInstant = Set((0..<100).map { _ in RandomID.timeOrdered(at: start) })
        #expect(sameInstant.count == 100)
    }

    @Test("the pool hands out each random byte once, across its refills, and ids made on many threads at once are all different")
    func poolAcrossRefills() {
        var pool = RandomPool()
        var chunks = Set<[UInt64]>()
        // 16 bytes a take: 64 takes a kilobyte, so 1,000 takes refill it 15 times.
        for _ in 0..<1_000 {
            let (a, b) = pool.take()
            chunks.insert([a, b])
        }
        #expect(chunks.count == 1_000)
        #expect(!chunks.contains([0, 0]))
        let ids = Mutex(Set<String>())
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let mine = (0..<2_000).map { _ in RandomID.timeOrdered() }
            ids.withLock { $0.formUnion(mine) }
        }
        #expect(ids.withLock { $0.count } == 16_000)
    }
}
