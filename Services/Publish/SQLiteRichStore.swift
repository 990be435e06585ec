import Auth
import Foundation
import HubProtocol
import Storage

/// Rich payloads beside the SQLite store: the file is named by its SHA-256 in the data folder's
/// `rich/`, and its row (content type, size, expiry) is in `publish.db`.
final class SQLiteRichStore: RichStore {
    let database: SQLiteDatabase
    let directory: URL

    init(database: SQLiteDatabase, directory: URL) throws {
        self.database = database
        self.directory = directory
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func path(_ sha256: String) -> URL { directory.appendingPathComponent(sha256) }

    /// The file is synced to disk before its row is committed.
    func store(_ data: Data, contentType: String, expiresAt: Date) throws -> String {
        let sha256 = Crypto.sha256(data).hexString
        let target = path(sha256)
        if !FileManager.default.fileExists(atPath: target.path) {
            let temporary = directory.appendingPathComponent(".\(sha256)-\(UUID().uuidString)")
            guard FileManager.default.createFile(atPath: temporary.path, contents: data, attributes: [.posixPermissions: 0o600]) else {
                throw HubError(.unavailable, "cannot write the rich payload to \(directory.path)")
            }
            let handle = try FileHandle(forWritingTo: temporary)
            try handle.synchronize()
            try handle.close()
            guard rename(temporary.path, target.path) == 0 else {
                unlink(temporary.path)
                throw HubError(.unavailable, "cannot store the rich payload: \(String(cString: strerror(errno)))")
            }
        }
        try database.run(
            """
            INSERT INTO rich_blobs (sha256, content_type, size, expires_at) VALUES (?, ?, ?, ?)
            ON CONFLICT (sha256) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)
            """, [sha256, contentType, data.count, expiresAt.timeIntervalSince1970])
        return sha256
    }

    func fetch(_ sha256: String, now: Date) throws -> RichPayload? {
        guard let row = try database.queryOne(
            "SELECT content_type, expires_at FROM rich_blobs WHERE sha256 = ? AND expires_at > ?", [sha256, now.timeIntervalSince1970]),
            let data = FileManager.default.contents(atPath: path(sha256).path)
        else { return nil }
        return RichPayload(
            richId: sha256, contentType: try row.string("content_type", of: "rich_blobs"), data: data,
            expiresAt: try row.date("expires_at", of: "rich_blobs"))
    }

    /// Removes expired payloads from disk and from the store.
    func purge(now: Date) throws -> Int {
        let expired = try database.query("SELECT sha256 FROM rich_blobs WHERE expires_at <= ?", [now.timeIntervalSince1970])
            .map { try $0.string("sha256", of: "rich_blobs") }
        for sha256 in expired {
            try database.run("DELETE FROM rich_blobs WHERE sha256 = ?", [sha256])
            unlink(path(sha256).path)
        }
        return expired.count
    }

    var count: Int {
        get throws {
            guard let row = try database.queryOne("SELECT count(*) AS n FROM rich_blobs") else { return 0 }
            return try row.int("n", of: "rich_blobs")
        }
    }
}
