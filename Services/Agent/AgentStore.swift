import Bus
import Foundation
import Storage

/// The agent's settings and the set of deliveries already shown, in `agent.db` in its home folder.
/// The categories live here the way the seed's app keeps them in local storage.
final class AgentStore {
    let database: SQLiteDatabase

    init(database: SQLiteDatabase) {
        self.database = database
    }

    static func open(home: URL) throws -> AgentStore {
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        let database = try SQLiteDatabase(path: home.appendingPathComponent("agent.db").path)
        try database.migrate(AgentSchema.migrations)
        return AgentStore(database: database)
    }

    func setting(_ key: String) throws -> String? {
        try database.queryOne("SELECT value FROM settings WHERE key = ?", [key]).map { try $0.string("value", of: "settings") }
    }

    func set(_ key: String, _ value: String) throws {
        try database.run(
            "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [key, value])
    }

    var categories: [String] {
        get throws {
            guard let text = try setting("categories") else { return [] }
            do {
                return try JSONDecoder().decode([String].self, from: Data(text.utf8))
            } catch {
                throw StorageError(
                    code: 1, message: "the stored categories are not a JSON list of strings (\(text.prefix(60))); choose them again with nh-agent subscribe",
                    operation: "read categories")
            }
        }
    }

    func setCategories(_ categories: [String]) throws {
        var unique: [String] = []
        for category in categories where !unique.contains(category) { unique.append(category) }
        try set("categories", String(decoding: try JSONEncoder().encode(unique), as: UTF8.self))
    }

    /// This agent's installation id, made once and kept.
    /// This agent's installation id, made once and kept. Made and kept in one write, so that two
    /// processes opening a fresh store (the daemon and a command) agree on it.
    func installationId() throws -> String {
        if let id = try setting("installationId") { return id }
        return try database.transaction {
            if let id = try setting("installationId") { return id }
            let id = "linux-" + UUID().uuidString.lowercased()
            try set("installationId", id)
            return id
        }
    }

    /// This agent's own CURVE key pair, made once and kept, both halves in one write.
    func channelKeys() throws -> CurveKeyPair {
        if let pair = try existingChannelKeys() { return pair }
        return try database.transaction {
            if let pair = try existingChannelKeys() { return pair }
            let pair = try CurveKeyPair.generate()
            try set("curvePublicKey", pair.publicKey)
            try set("curveSecretKey", pair.secretKey)
            return pair
        }
    }

    /// The key pair when the agent has made it; nil before its first start. Commands use this, and
    /// never make one: a key they made would not be the one the running agent serves with.
    func existingChannelKeys() throws -> CurveKeyPair? {
        guard let publicKey = try setting("curvePublicKey"), let secretKey = try setting("curveSecretKey") else { return nil }
        return try CurveKeyPair(publicKey: publicKey, secretKey: secretKey)
    }

    /// Records a delivery as shown. Returns false when it was shown before.
    func markSeen(_ deliveryId: String, notificationId: String, now: Date) throws -> Bool {
        try database.run(
            "INSERT OR IGNORE INTO seen (delivery_id, notification_id, seen_at) VALUES (?, ?, ?)",
            [deliveryId, notificationId, now.timeIntervalSince1970]) > 0
    }

    func isSeen(_ deliveryId: String) throws -> Bool {
        try database.queryOne("SELECT 1 FROM seen WHERE delivery_id = ?", [deliveryId]) != nil
    }

    /// Forgets shown deliveries older than any that could still be redelivered.
    func forgetSeen(before: Date) throws {
        try database.run("DELETE FROM seen WHERE seen_at < ?", [before.timeIntervalSince1970])
    }
}
