import DispatchCore
import Foundation
import HubProtocol
import Push
import Testing

@testable import NHDispatch

/// The dispatcher's write path, event by event, with no store, socket or clock: when a turn is
/// written, what a fenced or failed write leads to, and how a reading of the leases or a new
/// session of the store changes what is served.
@Suite("Dispatcher write path")
struct WritePathTests {
    static let t0 = ContinuousClock.now
    static func at(_ ms: Int, held: Int = 0, awaited: Int = 0) -> WritePath.Moment {
        WritePath.Moment(now: t0 + .milliseconds(ms), held: held, awaited: awaited)
    }

    /// Two installations in different shards.
    static let a = Fixture.installation(inShard: 3), b = Fixture.installation(inShard: 5)

    /// A turn that planned and sent one notification to `a` and `b`, acknowledged one delivery of
    /// each, and (with `pushes`) hands one delivery of each to a push service.
    static func turn(pushes: Bool = false) -> DispatchTurn {
        var turn = DispatchTurn()
        let plans = [Fixture.plan("n1", a), Fixture.plan("n1", b)]
        turn.records.append((Fixture.notification("n1", sequence: 1), plans, [3, 5], Fixture.now, ParkedCounts()))
        turn.sent = plans.map { Fixture.delivery($0, of: "n1") }
        turn.acks = [(a, [DeliveryKey("old/\(a)")]), (b, [DeliveryKey("old/\(b)")])]
        if pushes {
            turn.pushes = [a, b].map {
                PushMessage(deliveryId: "p/\($0)", notificationId: "n1", installationId: $0, platform: .fcmv1, pushChannel: "c", payload: "{}",
                            expiresAt: Fixture.now.addingTimeInterval(60))
            }
        }
        return turn
    }

    static func change(owned: Set<Int>, cursors: [Int: UInt64], gained: Set<Int> = []) -> ShardLeaseKeeper.Change {
        ShardLeaseKeeper.Change(map: ShardMap(owned: owned, cursors: cursors), gained: gained)
    }

    /// A shared path whose write of `turn()` was fenced by shard 3, waiting for the leases.
    static func fencedOnShard3() -> WritePath {
        var path = WritePath(commits: .gatheredTurns, shared: true, now: t0)
        path.turn = turn()
        _ = path.on(.commit(force: true, at(1)))
        _ = path.on(.writeFailed(.leaseLost([3])))
        return path
    }

    @Test("SQLite: each turn is written at once into the open group, which commits once it is due")
    func openGroup() {
        var path = WritePath(commits: .openGroup, shared: false, now: Self.t0)
        #expect(path.on(.commit(force: false, Self.at(1))).names == [], "nothing to write")
        path.turn = Self.turn()
        #expect(path.on(.commit(force: false, Self.at(1))).names == ["write(records:1,sent:2,acks:2)"])
        #expect(path.turn.isEmpty && path.isWriting)
        #expect(path.on(.commit(force: true, Self.at(1))).names == [], "one write at a time")
        // Younger than the interval: the group stays open; past it with nothing held, it commits.
        #expect(path.on(.written(Self.at(10, held: 2, awaited: 2))).names == [])
        #expect(!path.isWriting)
        #expect(path.on(.groupTimer(Self.at(40, held: 2, awaited: 2))).names == [])
        #expect(path.on(.groupTimer(Self.at(60, held: 2, awaited: 2))).names == [], "acknowledgements awaited: held back")
        #expect(path.on(.groupTimer(Self.at(60, held: 2, awaited: 0))).names == ["flushGroup"])
        #expect(path.on(.groupTimer(Self.at(80, held: 2, awaited: 2))).names == [], "a new group")
        #expect(path.on(.groupTimer(Self.at(2_100, held: 2, awaited: 2))).names == ["flushGroup"], "never longer than 2 s")
        #expect(path.on(.writeGathered(Self.at(2_100))).names == [], "nothing is gathered on SQLite")
        #expect(path.on(.leaseBeat).names == [], "one dispatcher reads no leases")
    }

    @Test("SQLite: a turn's pushes go once its group has committed, when it commits with them, so a group rolled back hands nothing over")
    func pushesAfterTheGroup() {
        var path = WritePath(commits: .openGroup, shared: false, now: Self.t0)
        path.turn = Self.turn(pushes: true)
        _ = path.on(.commit(force: false, Self.at(10)))
        #expect(path.on(.written(Self.at(10))).names == ["submit(2)"], "the group stays open: handed over at once")
        path.turn = Self.turn(pushes: true)
        _ = path.on(.commit(force: false, Self.at(60)))
        #expect(path.on(.written(Self.at(60))).names == ["flushGroup(then submit 2)"])
    }

    @Test("PostgreSQL: turns are gathered until their group is due, or something reads the store; pushes go once written")
    func gatheredTurns() {
        var path = WritePath(commits: .gatheredTurns, shared: true, now: Self.t0)
        path.turn = Self.turn()
        #expect(path.on(.commit(force: false, Self.at(10, awaited: 2))).names == [], "gathered")
        #expect(path.on(.groupTimer(Self.at(60, awaited: 2))).names == [], "its deliveries' acknowledgements are awaited")
        #expect(path.on(.writeGathered(Self.at(70, awaited: 2))).names == ["write(records:1,sent:2,acks:2)"])
        #expect(path.on(.writeGathered(Self.at(70))).names == [], "not inside a write")
        #expect(path.on(.written(Self.at(71))).names == [])
        // A turn that hands deliveries to push services is written at once, and they go after it.
        path.turn = Self.turn(pushes: true)
        #expect(path.on(.commit(force: false, Self.at(72, awaited: 2))).names == ["write(records:1,sent:2,acks:2,pushes:2)"])
        #expect(path.on(.written(Self.at(73))).names == ["submit(2)"])
        // With nothing gathered, a group starts at the next turn.
        #expect(path.on(.groupTimer(Self.at(5_000))).names == [])
        path.turn = Self.turn()
        #expect(path.on(.commit(force: false, Self.at(5_010, awaited: 2))).names == [])
        #expect(path.on(.groupTimer(Self.at(5_070, awaited: 0))).names == ["write(records:1,sent:2,acks:2)"])
    }

    @Test("a fenced write reads the leases again and is written once more without the shards lost, pushes and all")
    func leaseLost() throws {
        var path = WritePath(commits: .gatheredTurns, shared: true, now: Self.t0)
        path.turn = Self.turn(pushes: true)
        #expect(path.on(.commit(force: true, Self.at(1))).names == ["write(records:1,sent:2,acks:2,pushes:2)"])
        #expect(path.on(.writeFailed(.leaseLost([3]))).names == ["forgetLeases([3])", "readLeases(force)"])
        #expect(path.isWriting, "the turn waits for the leases")
        #expect(path.on(.writeGathered(Self.at(2))).names == [], "what loads during the reading writes nothing")
        // The leases read: shard 3 is gone; the turn goes again with shard 5's work only.
        let directives = path.on(.leasesRead(Self.change(owned: [5], cursors: [5: 0]), held: [5], planned: [3: 1, 5: 1]))
        #expect(directives.names == ["serve([5])", "write(records:1,sent:1,acks:1,pushes:1)"])
        guard case .write(let kept) = directives.last else { Issue.record("no write"); return }
        #expect(kept.records.first?.1.map(\.installationId) == [Self.b] && kept.records.first?.2 == [5])
        #expect(kept.sent.map(\.installationId) == [Self.b] && kept.acks.map(\.0) == [Self.b])
        #expect(path.on(.written(Self.at(3))).names == ["submit(1)"])
        #expect(!path.isWriting && !path.rewinding)
    }

    @Test("a fenced write drops the work of a shard taken again at a new epoch meanwhile: it starts from the store")
    func retakenWhileFenced() {
        var path = Self.fencedOnShard3()
        let directives = path.on(.leasesRead(
            Self.change(owned: [3, 5], cursors: [3: 0, 5: 1], gained: [3]), held: [3, 5], planned: [3: 1, 5: 1]))
        #expect(directives.names == ["serve([3, 5])", "loadBacklog([3])", "pull", "write(records:1,sent:1,acks:1)"])
        guard case .write(let kept) = directives.last else { return }
        #expect(kept.acks.map(\.0) == [Self.b])
    }

    @Test("a fenced write fenced again fails: what is written the same however often is kept, the records are planned again")
    func fencedTwice() {
        var path = Self.fencedOnShard3()
        _ = path.on(.leasesRead(nil, held: [3, 5], planned: nil))
        #expect(path.on(.writeFailed(.leaseLost([5]))).names == ["reportFailure", "readLeases(force)"])
        #expect(path.rewinding && !path.isWriting)
        #expect(path.turn.records.isEmpty && path.turn.acks.count == 2 && path.turn.sent.count == 2)
    }

    @Test("a failed write on one dispatcher keeps what is written the same however often; the records come again from the cursor")
    func failedAlone() {
        var path = WritePath(commits: .openGroup, shared: false, now: Self.t0)
        path.turn = Self.turn()
        _ = path.on(.commit(force: false, Self.at(1)))
        #expect(path.on(.writeFailed(.failed("disk I/O error"))).names == ["reportFailure"])
        #expect(!path.rewinding && path.turn.records.isEmpty && path.turn.acks.count == 2)
        #expect(path.on(.commit(force: false, Self.at(2))).names == ["write(records:0,sent:2,acks:2)"])
    }

    @Test("a failed write on a shared store rewinds: nothing is planned until the leases are read, then from the store's cursors")
    func failedShared() {
        var path = WritePath(commits: .gatheredTurns, shared: true, now: Self.t0)
        path.turn = Self.turn()
        _ = path.on(.commit(force: true, Self.at(1)))
        #expect(path.on(.writeFailed(.failed("connection lost"))).names == ["reportFailure", "readLeases(force)"])
        #expect(path.rewinding)
        // The store could not be read: still rewinding, and the next beat is forced.
        #expect(path.on(.leasesRead(nil, held: [3, 5], planned: [3: 9, 5: 9])).names == [])
        #expect(path.on(.leaseBeat).names == ["readLeases(force)"])
        // Read: the store's cursors, not the core's, which had planned past them.
        let directives = path.on(.leasesRead(Self.change(owned: [3, 5], cursors: [3: 4, 5: 4]), held: [3, 5], planned: [3: 9, 5: 9]))
        #expect(directives.names == ["serve([3, 5])"])
        guard case .serve(let map) = directives.first else { return }
        #expect(map.cursors == [3: 4, 5: 4] && !path.rewinding)
        #expect(path.on(.leaseBeat).names == ["readLeases"])
    }

    @Test("a store on a new session: the write is not made, and its records wait for the cursors")
    func sessionChanged() {
        var path = WritePath(commits: .gatheredTurns, shared: true, now: Self.t0)
        path.turn = Self.turn()
        _ = path.on(.commit(force: true, Self.at(1)))
        #expect(path.on(.writeFailed(.sessionChanged)).names == [])
        #expect(!path.rewinding && path.turn.records.isEmpty && path.turn.acks.count == 2)
    }

    @Test("shards gained: held ones keep the core's cursors, gained ones start from the store's, with their backlog and a pull")
    func gained() {
        var path = WritePath(commits: .gatheredTurns, shared: true, now: Self.t0)
        path.turn = Self.turn()
        let directives = path.on(.leasesRead(
            Self.change(owned: [3, 5, 7], cursors: [3: 2, 5: 2, 7: 1], gained: [5, 7]), held: [3, 5, 7], planned: [3: 6, 5: 6]))
        #expect(directives.names == ["serve([3, 5, 7])", "loadBacklog([5, 7])", "pull"])
        guard case .serve(let map) = directives.first else { return }
        #expect(map.cursors == [3: 6, 5: 2, 7: 1])
        // Work gathered for a shard taken again is the store's now.
        #expect(path.turn.acks.map(\.0) == [Self.a] && path.turn.records.first?.2 == [3])
    }

    @Test("a new session of the store: what is written the same however often goes in, then the pull, the core and every shard start again")
    func storeRenewed() {
        var path = WritePath(commits: .gatheredTurns, shared: true, now: Self.t0)
        path.turn = Self.turn()
        let directives = path.on(.storeRenewed(Self.at(1)))
        #expect(directives.names == ["write(records:0,sent:2,acks:2)", "then(renewalWritten)"])
        #expect(path.on(.writeFailed(.sessionChanged)).names == [])
        #expect(path.on(.renewalWritten).names == ["forgetPull", "renewCore", "readLeases(force)"])
        #expect(path.rewinding && path.reloading)
        // Every shard held is loaded again, from the store's cursors.
        let read = path.on(.leasesRead(Self.change(owned: [3, 5], cursors: [3: 1, 5: 1]), held: [3, 5], planned: [3: 8, 5: 8]))
        #expect(read.names == ["serve([3, 5])", "loadBacklog([3, 5])", "pull"])
        guard case .serve(let map) = read.first else { return }
        #expect(map.cursors == [3: 1, 5: 1] && !path.rewinding && !path.reloading)
        // One dispatcher has no sessions to renew.
        var alone = WritePath(commits: .openGroup, shared: false, now: Self.t0)
        #expect(alone.on(.storeRenewed(Self.at(1))).names == [])
    }

    @Test("shards found lost outside a turn are forgotten and the leases read again")
    func lostOutsideATurn() {
        var path = WritePath(commits: .gatheredTurns, shared: true, now: Self.t0)
        #expect(path.on(.leasesLost([4])).names == ["forgetLeases([4])", "readLeases(force)"])
        #expect(path.on(.leasesRead(nil, held: [], planned: nil)).names == [], "no turn waits for them")
    }
}

extension [WritePath.Directive] {
    /// Each directive in short, for comparing.
    var names: [String] { map(\.name) }
}

extension WritePath.Directive {
    var name: String {
        switch self {
        case .write(let turn):
            let parts = ["records:\(turn.records.count)", "sent:\(turn.sent.count)", "acks:\(turn.acks.count)"]
                + (turn.pushes.isEmpty ? [] : ["pushes:\(turn.pushes.count)"])
            return "write(\(parts.joined(separator: ",")))"
        case .flushGroup(let pushes): return pushes.isEmpty ? "flushGroup" : "flushGroup(then submit \(pushes.count))"
        case .submit(let messages): return "submit(\(messages.count))"
        case .reportFailure: return "reportFailure"
        case .forgetLeases(let shards): return "forgetLeases(\(shards.sorted()))"
        case .readLeases(let force): return force ? "readLeases(force)" : "readLeases"
        case .serve(let map): return "serve(\(map.owned.sorted()))"
        case .loadBacklog(let shards): return "loadBacklog(\(shards.sorted()))"
        case .pull: return "pull"
        case .forgetPull: return "forgetPull"
        case .renewCore: return "renewCore"
        case .then(.renewalWritten): return "then(renewalWritten)"
        case .then: return "then"
        }
    }
}
