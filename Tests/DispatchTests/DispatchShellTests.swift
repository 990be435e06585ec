import Bus
import DispatchCore
import Foundation
import HubProtocol
import Postgres
import Push
import ServiceKit
import Storage
import TestSupport
import Testing

@testable import NHDispatch

/// The agents' channel in memory: what was sent, and nothing to read.
final class AgentChannelStandIn: AgentChannel {
    private(set) var sent: [[Data]] = []
    func send(_ route: Route, _ frame: Data, wait: Bool) throws(ZMQError) -> Bool {
        sent.append([route, frame])
        return true
    }
    func send(_ frames: [Data], wait: Bool) throws(ZMQError) -> Bool {
        sent.append(frames)
        return true
    }
    func receiveFromPeer(wait: Bool) throws(ZMQError) -> (frames: [Data], peer: String?)? { nil }
}

/// Another service in memory: the requests forwarded to it, never answered.
final class ForwardingStandIn: RequestForwarding {
    private(set) var requests: [Any] = []
    func forward<R: HubRequest>(_ request: R, completion: @escaping (Result<R.Reply, HubError>) -> Void) { requests.append(request) }
    func expire(now: Date) {}
}

/// The dispatcher's shell on a real store, with the agents' channel and the other services in
/// memory: the write path's fenced, failed and reloading paths as they reach the store, with no
/// socket. Every engine shares the store here, as PostgreSQL does in service; SQLite, one
/// connection, is shared by handing "another dispatcher" the same store.
@Suite("Dispatcher shell", .serialized)
final class DispatchShellTests {
    let harness: ServiceHarness
    let push: PushCenters

    init() throws {
        harness = try ServiceHarness(service: "nh-dispatch")
        push = try PushCenters(settings: PushSettings(), dataDir: harness.dataDir, post: { $0() })
    }

    deinit { push.stop() }

    /// SQLite, and PostgreSQL where a server is given (`make test` starts one).
    static let engines: [StoreEngine] = [.sqlite] + (StoreEngine.server == nil ? [] : [.postgresql])
    static let x = Fixture.installation(inShard: 0, "x"), y = Fixture.installation(inShard: 1, "y")
    static let here = "tcp://10.0.0.1:7722", there = "tcp://10.0.0.2:7722"

    /// A store for this dispatcher, and one for another dispatcher on the same data.
    func stores(_ engine: StoreEngine) throws -> (mine: any DeliveryStore, other: any DeliveryStore) {
        switch engine {
        case .postgresql:
            let url = try StoreEngine.postgresDatabase()
            return (try PostgresDeliveryStore(url: url), try PostgresDeliveryStore(url: url))
        default:
            let store = try SQLiteDeliveryStore(database: try StoreEngine.sqliteDatabase())
            return (store, store)
        }
    }

    static var perDevice: DispatcherSettings {
        var settings = DispatcherSettings()
        settings.parkBroadcasts = false
        return settings
    }

    /// A shell whose broadcasts give agents away a delivery each, so that the store's rows show
    /// what each write kept.
    func shell(_ store: any DeliveryStore) -> DispatchShell {
        let shell = DispatchShell(
            context: harness.context, settings: Self.perDevice, inbox: AgentInbox(messagesPerSecond: 100), store: store,
            leases: ShardLeaseKeeper(store: store, id: Self.here, period: 30), push: push, agents: AgentChannelStandIn(),
            publish: ForwardingStandIn(), registryWrites: ForwardingStandIn(), registry: nil, shared: true)
        shell.handle(.snapshot(RegistrySnapshot(sequence: 1, installations: [Self.x, Self.y].map {
            Installation(installationId: $0, pushChannel: String(repeating: "k", count: 40), tags: ["World"])
        })))
        // The first beat: the only live dispatcher takes every shard.
        shell.keepLeases()
        return shell
    }

    static func send(_ sequence: UInt64) -> AcceptedNotification {
        AcceptedNotification(
            sequence: sequence, notificationId: "n\(sequence)", send: SendNotification(format: .native, body: "{}", tagExpression: "World"),
            enqueuedAt: Date(), expiresAt: Date().addingTimeInterval(3_600))
    }

    /// Another dispatcher takes the first vacant or expired shard (shard 0, `x`'s), as if this
    /// dispatcher's leases had run out.
    func takeShardZero(_ other: any DeliveryStore) throws {
        let later = Date().addingTimeInterval(120)
        let taken = try other.claimLeases(owner: Self.there, endpoint: Self.there, count: 1, now: later, until: later.addingTimeInterval(30))
        #expect(Set(taken.keys) == [0])
    }

    @Test("a write fenced by a shard taken meanwhile is written again without that shard's work", arguments: DispatchShellTests.engines)
    func fenced(engine: StoreEngine) throws {
        let (store, other) = try stores(engine)
        let shell = shell(store)
        #expect(shell.leases.owned.count == Shards.count && shell.core.shards?.owned.count == Shards.count)
        try takeShardZero(other)
        shell.handle(.accepted([Self.send(1)], after: 0))
        shell.commit(now: true)
        shell.commitGroupIfDue()
        try store.flush()
        #expect(!shell.writes.isWriting && shell.writes.turn.isEmpty)
        #expect(try store.pending(for: Self.y, now: Date()).map(\.notificationId) == ["n1"])
        #expect(try store.pending(for: Self.x, now: Date()).isEmpty, "shard 0 is the other dispatcher's")
        #expect(!shell.leases.owned.contains(0) && shell.core.shards?.owned.contains(0) == false)
        let cursors = try store.shardCursors()
        #expect(cursors[1] == 1 && (cursors[0] ?? 0) == 0)
        #expect(try store.outcome("n1")?.targets == 1)
    }

    @Test("a write that fails keeps its acknowledgements, drops its records, and plans them again from the store's cursors", arguments: DispatchShellTests.engines)
    func failed(engine: StoreEngine) throws {
        let (store, _) = try stores(engine)
        let shell = shell(store)
        shell.handle(.accepted([Self.send(1)], after: 0))
        shell.commit(now: true)
        let delivered = try #require(try store.pending(for: Self.y, now: Date()).first)
        // The store refuses the next outcome: the write of n2 fails whole.
        try refuseOutcomes(store, true)
        shell.handle(.accepted([Self.send(2)], after: 1))
        #expect(shell.core.shards?.cursors[1] == 2, "planned in memory")
        shell.writes.turn.acks.append((Self.y, [DeliveryKey(delivered.deliveryId)]))
        shell.commit(now: true)
        #expect(shell.writes.turn.records.isEmpty && shell.writes.turn.acks.count == 1, "the acknowledgement waits for the next write")
        #expect(!shell.writes.rewinding, "the leases were read at once")
        #expect(shell.core.shards?.cursors[1] == 1 && shell.pullCursor() == 1, "back to the store's cursors")
        #expect(try store.outcome("n2") == nil)
        // The store takes writes again: n2 is planned again from the cursor, with the acknowledgement.
        try refuseOutcomes(store, false)
        shell.handle(.accepted([Self.send(2)], after: 1))
        shell.commit(now: true)
        try store.flush()
        #expect(try store.outcome("n2")?.targets == 2)
        #expect(try store.outcome("n1")?.acknowledged == 1)
        #expect(try store.shardCursors()[1] == 2)
    }

    @Test("shards taken bring their waiting deliveries: agents' as a backlog, push services' at once", arguments: DispatchShellTests.engines)
    func backlog(engine: StoreEngine) throws {
        let (store, _) = try stores(engine)
        // Written before this dispatcher started: one delivery to an agent, one to a phone.
        try store.writeTurn {
            try store.record(Self.send(1), plans: [
                Fixture.plan("n1", Self.x), Fixture.plan("n1", Self.y, platform: .fcmv1),
            ], sent: [], shards: Set(0..<Shards.count), now: Date())
        }
        try store.flush()
        let shell = shell(store)
        #expect(shell.core.backlogCount == 1, "x loads from the store when it says hello")
        // The phone's delivery went to the push services at once; with no credentials for FCM
        // here, its answer is a failure, written with the turn that followed.
        try store.flush()
        #expect(try store.pendingPush(now: Date()).isEmpty)
        #expect(try store.outcome("n1")?.failed == 1)
    }

    /// Makes the store refuse (or take again) every new outcome, as a full disk would.
    func refuseOutcomes(_ store: any DeliveryStore, _ refuse: Bool) throws {
        if let store = store as? SQLiteDeliveryStore {
            try store.database.execute(refuse
                ? "CREATE TRIGGER refuse BEFORE INSERT ON outcomes BEGIN SELECT RAISE(ABORT, 'the disk is full'); END"
                : "DROP TRIGGER refuse")
        } else if let store = store as? PostgresDeliveryStore {
            try store.connection.execute(refuse ? """
                CREATE FUNCTION dispatch.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the disk is full'; END $$;
                CREATE TRIGGER refuse BEFORE INSERT ON dispatch.outcomes FOR EACH ROW EXECUTE FUNCTION dispatch.refuse();
                """ : "DROP TRIGGER refuse ON dispatch.outcomes; DROP FUNCTION dispatch.refuse()")
        }
    }
}
