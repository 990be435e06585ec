import Foundation
import Postgres

@testable import NHRegistry

/// PostgreSQL for the contract tests: a database of its own per store, on the server
/// `NH_TEST_POSTGRES` names (`make test` starts a throwaway one).
enum TestPostgres {
    /// A new, empty database; returns its URL.
    static func freshDatabase() throws -> String {
        guard let admin = ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"] else {
            throw TestPostgresError("NH_TEST_POSTGRES is not set: run the tests under Tests/Support/pgserver.py run -- …")
        }
        return try PostgresConnection.createDatabase(on: admin, prefix: "nh_test_")
    }

    static func installationStore() throws -> any InstallationStore {
        try PostgresInstallationStore(url: try freshDatabase())
    }
}

struct TestPostgresError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
