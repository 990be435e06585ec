import Auth
import Foundation
import HubProtocol
import Postgres

/// Rich payloads on PostgreSQL: the bytes in the table `publish.rich_blobs` (bytea) beside their
/// content type, size and expiry, so that a payload one publish process stored can be fetched
/// through any other. Each statement commits itself.
final class PostgresRichStore: RichStore {
    let connection: PostgresConnection

    /// Uses the publish store's connection, whose migrations make the table.
    init(connection: PostgresConnection) {
        self.connection = connection
    }

    func store(_ data: Data, contentType: String, expiresAt: Date) throws -> String {
        let sha256 = Crypto.sha256(data).hexString
        try connection.run(
            """
            INSERT INTO publish.rich_blobs (sha256, content_type, size, expires_at, data) VALUES ($1, $2, $3, $4, $5)
            ON CONFLICT (sha256) DO UPDATE SET expires_at = greatest(publish.rich_blobs.expires_at, excluded.expires_at)
            """, [sha256, contentType, data.count, expiresAt.timeIntervalSince1970, data])
        return sha256
    }

    func fetch(_ sha256: String, now: Date) throws -> RichPayload? {
        guard let row = try connection.queryOne(
            "SELECT content_type, expires_at, data FROM publish.rich_blobs WHERE sha256 = $1 AND expires_at > $2",
            [sha256, now.timeIntervalSince1970])
        else { return nil }
        return RichPayload(
            richId: sha256, contentType: try row.string("content_type", of: "rich_blobs"), data: try row.data("data", of: "rich_blobs"),
            expiresAt: try row.date("expires_at", of: "rich_blobs"))
    }

    func purge(now: Date) throws -> Int {
        try connection.run("DELETE FROM publish.rich_blobs WHERE expires_at <= $1", [now.timeIntervalSince1970])
    }

    var count: Int {
        get throws { try connection.queryRow("SELECT count(*) AS n FROM publish.rich_blobs") { row throws(HubError) in try row.int("n", of: "rich_blobs") } }
    }
}
