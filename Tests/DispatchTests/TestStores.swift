import DispatchCore
import Foundation
import HubProtocol
import Postgres
import Push
import Storage
import Testing

@testable import NHDispatch

/// The engines the dispatcher's store runs on: SQLite always, PostgreSQL when `NH_TEST_POSTGRES`
/// names a server (`make test` starts a throwaway one), with a database of its own per store.
/// `sqliteInGroups` is SQLite as the dispatcher drives it: every write is a turn inside a group of
/// writes that stays open, so deliveries to agents are held in memory until something reads them.
enum StoreEngine: CaseIterable, Sendable {
    case sqlite, sqliteInGroups, postgresql

    static let server = ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"]
    static var available: [StoreEngine] { server == nil ? [.sqlite, .sqliteInGroups] : allCases }

    func makeStore() throws -> any DeliveryStore {
        switch self {
        case .sqlite: return try SQLiteDeliveryStore(database: try Self.sqliteDatabase())
        case .sqliteInGroups: return GroupedStore(try SQLiteDeliveryStore(database: try Self.sqliteDatabase()))
        case .postgresql: return try PostgresDeliveryStore(url: try Self.postgresDatabase())
        }
    }

    /// A new SQLite file in the temporary folder, brought to `migrations`.
    static func sqliteDatabase(_ migrations: [Migration] = SQLiteDeliveryStore.migrations) throws -> SQLiteDatabase {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("nh-dispatch-\(UUID().uuidString).db").path
        let database = try SQLiteDatabase(path: path)
        try database.migrate(migrations)
        return database
    }

    /// A new, empty database on the test server; its URL.
    static func postgresDatabase() throws -> String {
        try PostgresConnection.createDatabase(on: try #require(server), prefix: "nh_dispatch_test_")
    }
}

/// Notifications, plans and reads the tests share.
enum Fixture {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func notification(_ id: String, sequence: UInt64, test: Bool = false, expiresIn: TimeInterval = 3_600) -> AcceptedNotification {
        var send = SendNotification(format: .native, body: "{}")
        if test { send.test = true }
        return AcceptedNotification(
            sequence: sequence, notificationId: id, send: send, enqueuedAt: now.addingTimeInterval(-1), expiresAt: now.addingTimeInterval(expiresIn))
    }

    /// A delivery of `notification` to `installation` on `platform` (a Linux agent's by default).
    static func plan(
        _ notification: String, _ installation: String, payload: String = "hello", platform: Platform = .linux,
        expiresIn: TimeInterval = 3_600, unreachable: String? = nil
    ) -> PlannedDelivery {
        var plan = PlannedDelivery(
            deliveryId: "\(notification)/\(installation)/native", installationId: installation, template: nil, payload: payload,
            expiresAt: now.addingTimeInterval(expiresIn), platform: platform.rawValue)
        plan.pushChannel = "channel-\(installation)"
        if platform != .linux { plan.headers = ["apns-priority": "10"] }
        plan.unreachable = unreachable
        return plan
    }

    static func delivery(_ plan: PlannedDelivery, of notification: String) -> AgentDelivery {
        AgentDelivery(
            deliveryId: plan.deliveryId, notificationId: notification, installationId: plan.installationId, payload: plan.payload,
            expiresAt: plan.expiresAt)
    }

    /// An installation id in `shard`, the first of i-0, i-1… that falls there.
    static func installation(inShard shard: Int, _ prefix: String = "i") -> String {
        var n = 0
        while Shards.of("\(prefix)-\(n)") != shard { n += 1 }
        return "\(prefix)-\(n)"
    }

    /// How many rows one of the store's tables holds, whichever the engine.
    static func rows(_ table: String, in store: any DeliveryStore) throws -> Int {
        if let store = store as? GroupedStore {
            try store.inner.writeHeld()
            return try rows(table, in: store.inner)
        }
        if let store = store as? SQLiteDeliveryStore { return try store.database.queryOne("SELECT count(*) FROM \(table)")?[0].int ?? -1 }
        if let store = store as? PostgresDeliveryStore {
            return try store.connection.queryOne("SELECT count(*) FROM dispatch.\(table)")?[0].int ?? -1
        }
        return -1
    }
}

/// A SQLite store whose writes each run as a turn of the dispatcher's (`writeTurn`) inside a group
/// that stays open until `flush`, which the next write opens again.
final class GroupedStore: DeliveryStore {
    let inner: SQLiteDeliveryStore

    init(_ inner: SQLiteDeliveryStore) { self.inner = inner }

    private func turn<T>(_ body: () throws -> T) throws -> T {
        var result: T?
        try inner.writeTurn { result = try body() }
        return result!
    }

    var fence: LeaseFence? {
        get { inner.fence }
        set { inner.fence = newValue }
    }

    func writeTurn(_ body: () throws -> Void) throws { try inner.writeTurn(body) }
    func flush() throws { try inner.flush() }
    var held: Int { inner.held }
    func close() throws { try inner.close() }
    var commits: CommitStrategy { inner.commits }
    func cursor() throws -> UInt64 { try inner.cursor() }

    func record(
        _ notification: AcceptedNotification, plans: [PlannedDelivery], parked: ParkedCounts, sent: Set<DeliveryKey>, shards: Set<Int>?, now: Date
    ) throws {
        try turn { try inner.record(notification, plans: plans, parked: parked, sent: sent, shards: shards, now: now) }
    }

    func setPositions(_ positions: [(String, AgentPosition)]) throws { try turn { try inner.setPositions(positions) } }
    func keepOwed(_ owed: [OwedDelivery], installationId: String, now: Date) throws {
        try turn { try inner.keepOwed(owed, installationId: installationId, now: now) }
    }
    @discardableResult
    func catchUp(_ owed: [OwedDelivery], installationId: String, now: Date) throws -> [AgentDelivery] {
        try turn { try inner.catchUp(owed, installationId: installationId, now: now) }
    }
    func parked(now: Date, shards: Set<Int>?) throws -> [ParkedBroadcast] { try inner.parked(now: now, shards: shards) }
    func closePositions(shards: Set<Int>?) throws { try turn { try inner.closePositions(shards: shards) } }

    func markSent(_ deliveries: [AgentDelivery], now: Date) throws { try turn { try inner.markSent(deliveries, now: now) } }

    func acknowledge(_ acks: [(String, [DeliveryKey])], now: Date) throws -> Int {
        try turn { try inner.acknowledge(acks, now: now) }
    }

    func fail(_ failures: [DeliveryFailure], installationId: String, now: Date) throws {
        try turn { try inner.fail(failures, installationId: installationId, now: now) }
    }

    func pushed(_ results: [(PushMessage, PushResult)], now: Date) throws { try turn { try inner.pushed(results, now: now) } }
    func expire(now: Date, shards: Set<Int>?) throws -> Int { try turn { try inner.expire(now: now, shards: shards) } }
    func purge(now: Date) throws { try inner.purge(now: now) }
    func backlog(now: Date, shards: Set<Int>?) throws -> Set<String> { try inner.backlog(now: now, shards: shards) }

    func unacknowledged(for installationId: String, now: Date, limit: Int) throws -> (deliveries: [AgentDelivery], sentBefore: Set<String>) {
        try inner.unacknowledged(for: installationId, now: now, limit: limit)
    }

    func pendingPush(now: Date, limit: Int, shards: Set<Int>?) throws -> [PushMessage] { try inner.pendingPush(now: now, limit: limit, shards: shards) }
    func totals() throws -> [String: String] { try inner.totals() }
    func outcome(_ notificationId: String, in scope: HubScope?, now: Date) throws -> NotificationOutcome? {
        try inner.outcome(notificationId, in: scope, now: now)
    }
    func testResults(_ notificationId: String) throws -> TestResults? { try inner.testResults(notificationId) }

    func heartbeat(id: String, endpoint: String, now: Date) throws { try turn { try inner.heartbeat(id: id, endpoint: endpoint, now: now) } }
    func liveDispatchers(now: Date, within: TimeInterval) throws -> Int { try inner.liveDispatchers(now: now, within: within) }
    func renewLeases(owner: String, until: Date) throws -> [Int: UInt64] { try turn { try inner.renewLeases(owner: owner, until: until) } }

    func claimLeases(owner: String, endpoint: String, count: Int, now: Date, until: Date) throws -> [Int: UInt64] {
        try turn { try inner.claimLeases(owner: owner, endpoint: endpoint, count: count, now: now, until: until) }
    }

    func releaseLeases(owner: String, shards: Set<Int>) throws { try turn { try inner.releaseLeases(owner: owner, shards: shards) } }
    func leaseOwners(now: Date) throws -> [Int: String] { try inner.leaseOwners(now: now) }
    func shardCursors() throws -> [Int: UInt64] { try inner.shardCursors() }
}
