import Foundation
import Postgres
import Storage
import Testing

@testable import NHSync

/// The engines the sync store runs on. PostgreSQL takes part when `NH_TEST_POSTGRES` names a
/// server (`make test` starts a throwaway one); each store gets a database of its own.
enum StoreEngine: String, CaseIterable, CustomStringConvertible, Sendable {
    case sqlite, postgresql

    var description: String { rawValue }

    static let server = ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"]

    static var available: [StoreEngine] { server == nil ? [.sqlite] : allCases }

    /// A new, empty database on the test server; its URL.
    static func freshDatabase() throws -> String {
        try PostgresConnection.createDatabase(on: try #require(server), prefix: "nh_sync_test_")
    }

    /// A store in a new SQLite file, and the file's path.
    static func sqliteStore() throws -> (store: SQLiteUserNotificationStore, path: String) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("nh-sync-\(UUID().uuidString).db").path
        let database = try SQLiteDatabase(path: path)
        try database.migrate(SQLiteUserNotificationStore.migrations)
        return (SQLiteUserNotificationStore(database: database), path)
    }

    func makeStore() throws -> any UserNotificationStore {
        switch self {
        case .sqlite:
            return try Self.sqliteStore().store
        case .postgresql:
            return try PostgresUserNotificationStore(url: try Self.freshDatabase())
        }
    }
}
