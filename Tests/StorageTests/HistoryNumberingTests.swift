import Foundation
import Storage
import Testing

/// Numbers of a store's histories: each epoch's above every older one's, and a reader's position
/// checked against the point the histories share.
@Suite("History numbering")
struct HistoryNumberingTests {
    static let base1 = HistoryNumbering.base(epoch: 1)

    @Test("epoch 0 numbers as always; each later epoch starts above every number of the ones before")
    func bases() {
        #expect(HistoryNumbering.base(epoch: 0) == 0)
        #expect(Self.base1 == 1 << 40)
        #expect(HistoryNumbering.epoch(of: 25) == 0 && HistoryNumbering.epoch(of: Self.base1 + 1) == 1)
        #expect(HistoryNumbering.epoch(of: Self.base1 - 1) == 0)
        // A counter in an older history moves to the new one's first number; one in it counts on.
        #expect(HistoryNumbering.next(after: 20, base: Self.base1) == Self.base1 + 1)
        #expect(HistoryNumbering.next(after: Self.base1 + 7, base: Self.base1) == Self.base1 + 8)
        #expect(HistoryNumbering.next(after: 20, base: 0) == 21)
        // Numbers fit a signed 64-bit column, and JavaScript's exact integers, for thousands of failovers.
        #expect(HistoryNumbering.base(epoch: 8_000) < UInt64(1) << 53)
    }

    @Test(
        "a position is current up to the point its history shares with the current one, and rewound past it",
        arguments: [
            // (position, latest, next mark, expected)
            (UInt64(24), UInt64(20), UInt64?.none, HistoryNumbering.Position.rewound(shared: 20)),  // ahead of a counter that has not moved on
            (20, 20, nil, .current),
            (0, 0, nil, .current),
            (24, Self.base1 + 3, 20, .rewound(shared: 20)),  // the old history was 4 past where the new one went on
            (20, Self.base1 + 3, 20, .current),  // a replica that had everything: nothing lost
            (18, Self.base1 + 3, 20, .current),
            (Self.base1 + 2, Self.base1 + 3, nil, .current),  // a position of the current history
            (Self.base1 + 9, Self.base1 + 3, nil, .rewound(shared: Self.base1 + 3)),
        ] as [(UInt64, UInt64, UInt64?, HistoryNumbering.Position)])
    func check(position: UInt64, latest: UInt64, mark: UInt64?, expected: HistoryNumbering.Position) {
        #expect(HistoryNumbering.check(position, latest: latest, nextMark: mark) == expected)
    }

    @Test("a new history's epoch moves on by the timelines the server moved past the last history it holds")
    func nextEpoch() {
        let at = Date(timeIntervalSince1970: 0)
        #expect(StoreHistory.epoch(after: nil, timeline: 3) == 0, "the first history, whatever the timeline")
        let first = StoreHistory(epoch: 0, id: "a", timeline: 1, beganAt: at)
        #expect(StoreHistory.epoch(after: first, timeline: 2) == 1)
        // Promoted twice while the standby saw only the first history: above the one it never saw.
        #expect(StoreHistory.epoch(after: first, timeline: 3) == 2)
        // A timeline that does not grow (a restore into an older line) still begins a new epoch.
        #expect(StoreHistory.epoch(after: StoreHistory(epoch: 4, id: "b", timeline: 7, beganAt: at), timeline: 2) == 5)
    }
}
