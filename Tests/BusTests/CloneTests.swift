import Bus
import Foundation
import Testing

@Suite("Sequenced pub/sub")
struct CloneTests {
    @Test("the tracker applies in order, skips old, and asks for a snapshot on a gap")
    func tracker() {
        var tracker = SequenceTracker()
        #expect(tracker.observe(3) == .resync(expected: 1, got: 3))
        tracker.reset(to: 5)
        #expect(tracker.observe(4) == .skip)
        #expect(tracker.observe(5) == .skip)
        #expect(tracker.observe(6) == .apply)
        #expect(tracker.position == 6)
        #expect(tracker.observe(8) == .resync(expected: 7, got: 8))
        #expect(tracker.position == 6)
        #expect(tracker.observe(6, heartbeat: true) == .skip)
        #expect(tracker.observe(9, heartbeat: true) == .resync(expected: 6, got: 9))
        #expect(tracker.observe(2, heartbeat: true) == .resync(expected: 6, got: 2))
    }

    @Test("a sequenced message round-trips its frames, and bad frames are refused")
    func frames() throws {
        let message = SequencedMessage(topic: "t", sequence: 0x0102_0304_0506_0708, body: Data("b".utf8))
        #expect(try SequencedMessage(frames: message.frames) == message)
        #expect(message.frames[1] == Data([1, 2, 3, 4, 5, 6, 7, 8]))
        #expect(throws: BusError.self) { try SequencedMessage(frames: [Data("t".utf8), Data([1]), Data()]) }
        #expect(throws: BusError.self) { try SequencedMessage(frames: [Data("t".utf8)]) }
    }

    @Test("a late joiner snapshots, then follows; a missed message leads to a new snapshot")
    func lateJoinerAndGap() throws {
        let owner = try Owner()
        for index in 1...5 { try owner.set("k\(index)", "v\(index)") }

        var replicaState: [String: String] = [:]
        var applied: [UInt64] = []
        let replica = try CloneReplica(
            connect: owner.publisher.endpoints[0],
            snapshot: {
                replicaState = owner.state
                return owner.publisher.sequence
            },
            apply: { message in
                let parts = String(decoding: message.body, as: UTF8.self).split(separator: "=", maxSplits: 1)
                if parts.count == 2 { replicaState[String(parts[0])] = String(parts[1]) }
                applied.append(message.sequence)
            })
        defer { replica.close() }

        // Wait for the subscription to be live: heartbeats start arriving.
        try pumpUntil(replica, owner) { replica.snapshots >= 1 }
        #expect(replicaState == owner.state)
        #expect(replica.tracker.position == 5)

        try owner.set("k6", "v6")
        try owner.set("k7", "v7")
        try pumpUntil(replica, owner) { replica.tracker.position == 7 }
        #expect(applied == [6, 7])
        #expect(replica.snapshots == 1)

        // Sequence 8 is lost on the way; 9 reveals the gap.
        owner.state["k8"] = "v8"
        try owner.publisher.publish(topic: "kv", sequence: 9, body: Data("k9=v9".utf8))
        owner.state["k9"] = "v9"
        try pumpUntil(replica, owner) { replica.snapshots == 2 }
        #expect(replicaState == owner.state)
        #expect(replicaState["k8"] == "v8")
        #expect(replica.tracker.position == 9)
    }

    @Test("a heartbeat ahead of the reader reveals a lost last message")
    func heartbeatRevealsLostTail() throws {
        let owner = try Owner()
        // Change 1 goes out before the reader is there, and its first snapshot is stale (taken at 0),
        // so only the heartbeat can tell it that it is behind.
        try owner.set("k1", "v1")
        var snapshots: [UInt64] = []
        let replica = try CloneReplica(
            connect: owner.publisher.endpoints[0],
            snapshot: {
                let sequence = snapshots.isEmpty ? 0 : owner.publisher.sequence
                snapshots.append(sequence)
                return sequence
            },
            apply: { _ in Issue.record("nothing should be applied") })
        defer { replica.close() }
        try pumpUntil(replica, owner) { snapshots.count >= 2 }
        #expect(snapshots == [0, 1])
        #expect(replica.tracker.position == 1)
    }

    @Test("a snapshot is confirmed once a message comes on the stream: before that, changes sent meanwhile may be lost unseen")
    func confirmedByAMessage() throws {
        let owner = try Owner()
        try owner.set("k1", "v1")
        let replica = try CloneReplica(
            connect: owner.publisher.endpoints[0], snapshot: { owner.publisher.sequence }, apply: { _ in })
        defer { replica.close() }
        #expect(try replica.pump() == 0)
        // The first pump took the snapshot; no message has come yet.
        #expect(replica.snapshots == 1 && replica.tracker.position == 1 && !replica.confirmed)
        try pumpUntil(replica, owner) { replica.confirmed }
        #expect(replica.snapshots == 1)
        try replica.resync()
        #expect(!replica.confirmed)
        try pumpUntil(replica, owner) { replica.confirmed }
    }

    /// Pumps the replica and sends heartbeats until `done`, for at most 5 seconds.
    func pumpUntil(_ replica: CloneReplica, _ owner: Owner, _ done: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(5)
        while !done() {
            guard Date() < deadline else {
                Issue.record("condition not reached within 5 s")
                return
            }
            try owner.publisher.heartbeat()
            try replica.pump()
            Thread.sleep(forTimeInterval: 0.01)
        }
    }
}

/// The owner's state: a key-value map and the sequence of its last change.
final class Owner {
    var state: [String: String] = [:]
    let publisher: SequencedPublisher
    init() throws { publisher = try SequencedPublisher(bind: ["inproc://clone-\(UUID().uuidString)"]) }
    func set(_ key: String, _ value: String) throws {
        state[key] = value
        try publisher.publish(topic: "kv", body: Data("\(key)=\(value)".utf8))
    }
}

