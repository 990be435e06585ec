import Foundation
import Postgres

@testable import NHPublish

/// PostgreSQL for the contract tests: a database of its own per test, on the server
/// `NH_TEST_POSTGRES` names (`make test` starts a throwaway one).
enum TestPostgres {
    static var isAvailable: Bool { ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"] != nil }

    /// A new, empty database; returns its URL.
    static func freshDatabase() throws -> String {
        guard let admin = ProcessInfo.processInfo.environment["NH_TEST_POSTGRES"], var url = URLComponents(string: admin) else {
            throw PostgresError(message: "NH_TEST_POSTGRES is not set: run the tests under Tests/Support/pgserver.py run -- …", operation: "test")
        }
        let name = "nh_publish_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let connection = try PostgresConnection(url: admin)
        defer { connection.close() }
        try connection.execute("CREATE DATABASE \(name)")
        url.path = "/" + name
        return url.string ?? admin
    }
}
