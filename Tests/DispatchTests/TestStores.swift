import DispatchCore
import Foundation
import HubProtocol
import Postgres
import Storage
import Testing

@testable import NHDispatch

/// The engines the dispatcher's store runs on: SQLite always, PostgreSQL when `NH_TEST_POSTGRES`
/// names a server (`make test` starts a throwaway one), with a database of its own per store.
enum StoreEngine: CaseIterable, Sendable {
    case sqlite, postgresql

    static let server = ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"]
    static var available: [StoreEngine] { server == nil ? [.sqlite] : allCases }

    func makeStore() throws -> any DeliveryStore {
        switch self {
        case .sqlite: return try SQLiteDeliveryStore(database: try Self.sqliteDatabase())
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
        if let store = store as? SQLiteDeliveryStore { return try store.database.queryOne("SELECT count(*) FROM \(table)")?[0].int ?? -1 }
        if let store = store as? PostgresDeliveryStore {
            return try store.connection.queryOne("SELECT count(*) FROM dispatch.\(table)")?[0].int ?? -1
        }
        return -1
    }
}
