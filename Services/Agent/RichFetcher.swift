import Auth
import Foundation
import HubProtocol
import ServiceKit
import Storage

/// Rich push on the agent: a silent notification is kept until its payload is fetched, checked
/// (size and SHA-256) and cached; only then is the notification shown. A fetch that fails is tried
/// again with backoff; after the last try the notification is reported failed, never delivered.
final class RichFetcher {
    let database: SQLiteDatabase
    let store: AgentStore
    let cacheDirectory: URL
    let client: HubClient
    /// Opens a payload encrypted end to end for the user's key (the id given); nil when the agent
    /// is signed in as no user.
    var open: ((Data, String) throws -> Data)?
    let output: AgentOutput
    let logger: Logger
    let maxAttempts: Int
    private let encoder = HubCodec.makeEncoder()
    private let decoder = HubCodec.makeDecoder()

    init(store: AgentStore, home: URL, client: HubClient, output: AgentOutput, logger: Logger, maxAttempts: Int) throws {
        self.store = store
        database = store.database
        cacheDirectory = home.appendingPathComponent("rich", isDirectory: true)
        try FileManager.default.createDirectory(at: cacheDirectory, withIntermediateDirectories: true)
        self.client = client
        self.output = output
        self.logger = logger
        self.maxAttempts = max(1, maxAttempts)
    }

    enum Answer: Equatable {
        /// Shown before: acknowledge it again.
        case acknowledge
        /// Given up on before: report the failure again.
        case fail(DeliveryFailure)
        /// Kept until its payload is fetched.
        case wait
    }

    /// Takes a silent notification from the dispatcher, which may send one again until it hears back.
    func received(_ delivery: AgentDelivery, now: Date) throws -> Answer {
        if try store.isSeen(delivery.deliveryId) { return .acknowledge }
        if let row = try database.queryOne(
            "SELECT last_error FROM rich_pending WHERE delivery_id = ? AND next_at = ?", [delivery.deliveryId, Self.givenUp]),
            let reason = try row.optionalString("last_error", of: "rich_pending")
        {
            return .fail(DeliveryFailure(deliveryId: delivery.deliveryId, reason: reason))
        }
        try database.run(
            "INSERT OR IGNORE INTO rich_pending (delivery_id, delivery, next_at) VALUES (?, ?, ?)",
            [delivery.deliveryId, try encoder.encode(delivery), now.timeIntervalSince1970])
        return .wait
    }

    /// The next_at of a delivery given up on: never due again, kept to answer repeats.
    static let givenUp = Double.greatestFiniteMagnitude

    /// Tries the fetches that are due. Returns the deliveries shown and those given up on.
    func processDue(now: Date) throws -> (shown: [String], failed: [DeliveryFailure]) {
        let rows = try database.query(
            "SELECT delivery_id, delivery, attempts FROM rich_pending WHERE next_at <= ? ORDER BY next_at LIMIT 20",
            [now.timeIntervalSince1970])
        var shown: [String] = []
        var failed: [DeliveryFailure] = []
        for row in rows {
            guard let delivery = try kept(row) else { continue }
            let attempts = try row.int("attempts", of: "rich_pending") + 1
            do {
                let path = try fetch(delivery)
                // Shown first, then remembered: a crash between the two shows it again, never not at all.
                guard output.show(delivery, now: now, richPath: path) else { throw HubError(.unavailable, "standard output would not take the notification") }
                try database.transaction {
                    try database.run("DELETE FROM rich_pending WHERE delivery_id = ?", [delivery.deliveryId])
                    _ = try store.markSeen(delivery.deliveryId, notificationId: delivery.notificationId, now: now)
                }
                shown.append(delivery.deliveryId)
            } catch {
                let reason = (error as? HubError)?.description ?? "\(error)"
                switch AgentCore.richRetry(attempts: attempts, maxAttempts: maxAttempts, expiresAt: delivery.expiresAt, now: now) {
                case .giveUp:
                    let failure = DeliveryFailure(
                        deliveryId: delivery.deliveryId, reason: "rich fetch failed after \(attempts) tries: \(reason)")
                    try database.run(
                        "UPDATE rich_pending SET attempts = ?, next_at = ?, last_error = ? WHERE delivery_id = ?",
                        [attempts, Self.givenUp, failure.reason, delivery.deliveryId])
                    output.event("rich.failed", [
                        "deliveryId": delivery.deliveryId, "notificationId": delivery.notificationId,
                        "attempts": String(attempts), "reason": reason,
                    ])
                    failed.append(failure)
                case .retry(let delay):
                    try database.run(
                        "UPDATE rich_pending SET attempts = ?, next_at = ?, last_error = ? WHERE delivery_id = ?",
                        [attempts, now.timeIntervalSince1970 + delay, reason, delivery.deliveryId])
                    logger.info("rich fetch failed; retrying", ("delivery", delivery.deliveryId), ("attempt", attempts), ("in", delay))
                }
                // Others due now most likely fail the same way; they wait for the next tick rather than
                // hold the loop for a timeout each.
                break
            }
        }
        return (shown, failed)
    }

    /// Fetches, checks and caches one payload; returns the cached file's path.
    private func fetch(_ delivery: AgentDelivery) throws -> String {
        guard let rich = delivery.rich, let ticket = delivery.richTicket else {
            throw HubError(.invalidPayload, "the delivery has no rich reference or ticket")
        }
        let target = cacheDirectory.appendingPathComponent(rich.richId + Self.fileExtension(rich.contentType))
        if !FileManager.default.fileExists(atPath: target.path) {
            let payload = try client.call(RichFetchRequest(richId: rich.richId, ticket: ticket))
            guard payload.data.count == rich.size else {
                throw HubError(.invalidPayload, "the payload is \(payload.data.count) bytes, not the \(rich.size) announced")
            }
            guard Crypto.sha256(payload.data).hexString == rich.richId else {
                throw HubError(.invalidPayload, "the payload's SHA-256 does not match its id")
            }
            // What the hub handed back is the record as stored; the file holds what it seals.
            var contents = payload.data
            if let keyId = rich.keyId {
                guard let open else {
                    throw HubError(.invalidPayload, "the rich payload is encrypted end to end, and this agent is signed in as no user to hold the key")
                }
                contents = try open(payload.data, keyId)
            }
            let temporary = cacheDirectory.appendingPathComponent(".\(rich.richId)-\(UUID().uuidString)")
            guard FileManager.default.createFile(atPath: temporary.path, contents: contents),
                rename(temporary.path, target.path) == 0
            else {
                unlink(temporary.path)
                throw HubError(.internal, "cannot write \(target.path)")
            }
        }
        try database.run(
            """
            INSERT INTO rich_cache (sha256, path, expires_at) VALUES (?, ?, ?)
            ON CONFLICT (sha256) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)
            """, [rich.richId, target.path, delivery.expiresAt.timeIntervalSince1970])
        return target.path
    }

    /// Deletes cached payloads whose notifications have all expired.
    func purge(now: Date) throws {
        let rows = try database.query("SELECT sha256, path FROM rich_cache WHERE expires_at <= ?", [now.timeIntervalSince1970])
        for row in rows {
            unlink(try row.string("path", of: "rich_cache"))
            try database.run("DELETE FROM rich_cache WHERE sha256 = ?", [try row.string("sha256", of: "rich_cache")])
        }
        // Failures are kept to answer repeats until the delivery itself has expired.
        for row in try database.query("SELECT delivery_id, delivery FROM rich_pending WHERE next_at = ?", [Self.givenUp]) {
            if let delivery = try kept(row), delivery.expiresAt <= now {
                try database.run("DELETE FROM rich_pending WHERE delivery_id = ?", [delivery.deliveryId])
            }
        }
    }

    /// The delivery a rich_pending row keeps. One that no longer decodes could never be fetched
    /// nor expire: it is dropped, with a log line, and nil returned; the dispatcher sends a
    /// delivery not acknowledged again.
    private func kept(_ row: Row) throws -> AgentDelivery? {
        let id = try row.string("delivery_id", of: "rich_pending")
        let data = try row.data("delivery", of: "rich_pending")
        do {
            return try decoder.decode(AgentDelivery.self, from: data)
        } catch {
            logger.error(
                "a kept rich delivery does not decode; dropped", ("delivery", id), ("bytes", data.count), ("error", "\(error)"))
            try database.run("DELETE FROM rich_pending WHERE delivery_id = ?", [id])
            return nil
        }
    }

    static func fileExtension(_ contentType: String) -> String {
        switch contentType.lowercased() {
        case "image/png": return ".png"
        case "image/jpeg": return ".jpg"
        case "image/gif": return ".gif"
        case "image/webp": return ".webp"
        case "image/svg+xml": return ".svg"
        case "audio/mpeg": return ".mp3"
        case "audio/ogg": return ".ogg"
        case "text/plain": return ".txt"
        case "application/pdf": return ".pdf"
        default: return ".bin"
        }
    }
}
