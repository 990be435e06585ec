import Foundation

@testable import NHRegistry

/// PostgreSQL for the contract tests: a database of its own per store, on the server
/// `NH_TEST_POSTGRES` names.
enum TestPostgres {
    static func installationStore() throws -> any InstallationStore {
        throw TestPostgresError("PostgreSQL stores are not built yet")
    }
}

struct TestPostgresError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
