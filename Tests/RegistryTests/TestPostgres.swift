import Foundation
import Postgres

@testable import NHRegistry

/// PostgreSQL for the contract tests: a database of its own per store, on the server
/// `NH_TEST_POSTGRES` names (`make test` starts a throwaway one).
enum TestPostgres {
    /// A new, empty database; returns its URL.
    static func freshDatabase() throws -> String {
        guard let admin = ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"], var url = URLComponents(string: admin) else {
            throw TestPostgresError("NH_TEST_POSTGRES is not set: run the tests under Tests/Support/pgserver.py run -- …")
        }
        let name = "nh_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let connection = try PostgresConnection(url: admin)
        defer { connection.close() }
        try connection.execute("CREATE DATABASE \(name)")
        url.path = "/" + name
        return url.string ?? admin
    }

    static func installationStore() throws -> any InstallationStore {
        try PostgresInstallationStore(url: try freshDatabase())
    }
}

struct TestPostgresError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
