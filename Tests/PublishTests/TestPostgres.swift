import Foundation
import Postgres

@testable import NHPublish

/// PostgreSQL for the contract tests: a database of its own per test, on the server
/// `NH_TEST_POSTGRES` names (`make test` starts a throwaway one).
enum TestPostgres {
    static var isAvailable: Bool { ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"] != nil }

    /// A new, empty database; returns its URL.
    static func freshDatabase() throws -> String {
        guard let admin = ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"] else {
            throw PostgresError(message: "NH_TEST_POSTGRES is not set: run the tests under Tests/Support/pgserver.py run -- …", operation: "test")
        }
        return try PostgresConnection.createDatabase(on: admin, prefix: "nh_publish_")
    }
}
