import Foundation
import HubProtocol

/// Rich payloads, stored by content under their SHA-256, so the same bytes sent twice are stored
/// once. A payload lives as long as the longest notification that refers to it. On SQLite the
/// bytes are files in the data folder; on PostgreSQL a table, so that every publish process
/// sharing the database can hand out what any of them stored.
protocol RichStore: AnyObject {
    /// Stores the bytes durably and returns their SHA-256 in hex.
    func store(_ data: Data, contentType: String, expiresAt: Date) throws -> String
    /// A payload that has not expired, or nil.
    func fetch(_ sha256: String, now: Date) throws -> RichPayload?
    /// Removes expired payloads; returns how many.
    func purge(now: Date) throws -> Int
    var count: Int { get throws }
}
