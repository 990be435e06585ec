import Foundation

extension PostgresConnection {
    /// Creates a new, empty database on the server `url` names, called `prefix` and a random
    /// suffix, and returns its URL: the same server, user and options. For tests that each want
    /// a database of their own.
    public static func createDatabase(on url: String, prefix: String = "nh_") throws -> String {
        guard var components = URLComponents(string: url) else {
            throw PostgresError(message: "bad PostgreSQL URL", operation: "create a database")
        }
        let name = prefix + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        let connection = try PostgresConnection(url: url)
        defer { connection.close() }
        try connection.execute("CREATE DATABASE \(quoteIdentifier(name))")
        components.path = "/" + name
        return components.string ?? url
    }
}
