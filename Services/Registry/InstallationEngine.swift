import Foundation
import HubProtocol
import Postgres
import Storage
import StoreEngines

/// One engine's statements for the registry, written with numbered parameters (`$1`); `list`
/// builds its statement from the table names and the byte-order collation.
struct InstallationSQL: Sendable {
    /// What precedes a table's name: the schema, where there is one.
    var prefix: String
    /// Table names, with the schema where there is one.
    var installations: String
    var tags: String
    var changes: String
    /// What makes text compare byte by byte (ids in order as SQLite orders them).
    var byteOrder: String
    /// A statement as the engine spells numbered parameters.
    var spell: @Sendable (String) -> String
    /// () → sequence.
    var sequence: String
    /// () → sequence: the next; on PostgreSQL the row stays locked until the change commits, so
    /// sequences commit in order and without gaps.
    var nextSequence: String
    /// (id, now) → document, when live.
    var get: String
    /// (id) → document.
    var stored: String
    /// (id, document, user, expires at, updated at, push channel).
    var upsert: String
    /// (id).
    var delete: String
    /// (id).
    var deleteTags: String
    /// (id).
    var deleteEndpoints: String
    /// (endpoint id, id).
    var insertEndpoint: String
    /// (endpoint id) → installation_id: who holds an endpoint.
    var endpointHolder: String
    /// (endpoint id, now) → document, when live.
    var byEndpoint: String
    /// (now) → id, of those expired.
    var expired: String
    /// (now) → n: how many are live.
    var count: String
    /// (now) → document, of every live installation in id order.
    var snapshot: String
    /// (sequence, id, document).
    var log: String
    /// (after, limit) → (sequence, id, document).
    var changesAfter: String
    /// (count, at least 1): keeps the newest `count` changes, counted, not numbered: a new history's
    /// numbers start far above the old one's.
    var prune: String
    /// () → version: the hub catalog's.
    var catalogVersion: String
    /// () → version: the next, the row locked until the change commits.
    var nextCatalogVersion: String
    /// () → document, of every hub with policies of its own.
    var hubs: String
    /// (name, document).
    var saveHub: String
    /// (name).
    var deleteHub: String
    /// (name) → generation: the next of a hub's name, 1 for a name never used.
    var nextGeneration: String

    init(prefix p: String, byteOrder: String, spell: @escaping @Sendable (String) -> String = { $0 }) {
        self.spell = spell
        prefix = p
        installations = "\(p)installations"
        tags = "\(p)installation_tags"
        changes = "\(p)changes"
        self.byteOrder = byteOrder
        sequence = spell("SELECT sequence FROM \(p)stream WHERE id = 1")
        nextSequence = spell("UPDATE \(p)stream SET sequence = sequence + 1 WHERE id = 1 RETURNING sequence")
        get = spell("SELECT document FROM \(p)installations WHERE installation_id = $1 AND (expires_at IS NULL OR expires_at > $2)")
        stored = spell("SELECT document FROM \(p)installations WHERE installation_id = $1")
        upsert = spell("""
            INSERT INTO \(p)installations (installation_id, document, user_id, expires_at, updated_at, push_channel)
            VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (installation_id) DO UPDATE SET document = excluded.document, user_id = excluded.user_id,
                expires_at = excluded.expires_at, updated_at = excluded.updated_at, push_channel = excluded.push_channel
            """)
        delete = spell("DELETE FROM \(p)installations WHERE installation_id = $1")
        deleteTags = spell("DELETE FROM \(p)installation_tags WHERE installation_id = $1")
        deleteEndpoints = spell("DELETE FROM \(p)installation_endpoints WHERE installation_id = $1")
        insertEndpoint = spell("INSERT INTO \(p)installation_endpoints (endpoint_id, installation_id) VALUES ($1, $2)")
        endpointHolder = spell("SELECT installation_id FROM \(p)installation_endpoints WHERE endpoint_id = $1")
        byEndpoint = spell("""
            SELECT i.document FROM \(p)installation_endpoints e JOIN \(p)installations i ON i.installation_id = e.installation_id
            WHERE e.endpoint_id = $1 AND (i.expires_at IS NULL OR i.expires_at > $2)
            """)
        expired = spell("SELECT installation_id FROM \(p)installations WHERE expires_at IS NOT NULL AND expires_at <= $1 ORDER BY installation_id\(byteOrder)")
        count = spell("SELECT count(*) AS n FROM \(p)installations WHERE expires_at IS NULL OR expires_at > $1")
        snapshot = spell("SELECT document FROM \(p)installations WHERE expires_at IS NULL OR expires_at > $1 ORDER BY installation_id\(byteOrder)")
        log = spell("INSERT INTO \(p)changes (sequence, installation_id, document) VALUES ($1, $2, $3)")
        changesAfter = spell("SELECT sequence, installation_id, document FROM \(p)changes WHERE sequence > $1 ORDER BY sequence LIMIT $2")
        prune = spell("DELETE FROM \(p)changes WHERE sequence < (SELECT sequence FROM \(p)changes ORDER BY sequence DESC LIMIT 1 OFFSET $1 - 1)")
        catalogVersion = spell("SELECT version FROM \(p)hub_catalog WHERE id = 1")
        nextCatalogVersion = spell("UPDATE \(p)hub_catalog SET version = version + 1 WHERE id = 1 RETURNING version")
        hubs = spell("SELECT document FROM \(p)hubs ORDER BY name")
        saveHub = spell("INSERT INTO \(p)hubs (name, document) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET document = excluded.document")
        deleteHub = spell("DELETE FROM \(p)hubs WHERE name = $1")
        nextGeneration = spell("""
            INSERT INTO \(p)hub_generations (name, generation) VALUES ($1, 1)
            ON CONFLICT (name) DO UPDATE SET generation = \(p)hub_generations.generation + 1 RETURNING generation
            """)
    }

    /// The condition (on `column`) that keeps one hub's keys: those after its prefix and before the
    /// next ('/' + 1 is '0'), which an index on the column reads as a range; for the default hub,
    /// keys without a '/'.
    func owned(by scope: HubScope, column: String) -> String {
        guard !scope.isDefault else { return "\(column) NOT LIKE '%/%'" }
        let low = scope.prefix.replacingOccurrences(of: "'", with: "''")
        let high = String(low.dropLast()) + "0"
        return "\(column)\(byteOrder) >= '\(low)' AND \(column)\(byteOrder) < '\(high)'"
    }
}

/// One engine of the registry: its statements, its connection, and what differs (tags written,
/// a change logged, a point-in-time read, SQLite's spelling of parameters). The store's behaviour
/// lives in this protocol's extension, alike for both engines.
protocol InstallationEngine: InstallationStore, EngineBacked {
    static var sql: InstallationSQL { get }
    var encoder: JSONEncoder { get }
    var decoder: JSONDecoder { get }
    /// Writes an installation's tags, its old ones deleted.
    func insertTags(_ tags: [String], of id: String) throws
    /// A change was logged in the write under way.
    func logged(_ sequence: UInt64) throws
}

extension InstallationEngine {
    private var sql: InstallationSQL { Self.sql }

    func sequence() throws -> UInt64 { try oneRow(sql.sequence).sequence("sequence", of: "stream") }

    /// Takes the next sequence; the first statement of every write, so that writers in every
    /// process sharing a store commit in the order of their numbers.
    private func nextSequence() throws -> UInt64 { try oneRow(sql.nextSequence).sequence("sequence", of: "stream") }

    func get(_ id: String, now: Date) throws -> Installation? {
        try one(sql.get, [id, now]).map(decode)
    }

    func live(_ ids: [String], now: Date) throws -> [String: Installation] {
        var found: [String: Installation] = [:]
        for id in ids { found[id] = try get(id, now: now) }
        return found
    }

    /// An installation as it is stored under `sequence`, with its document: the creation time it
    /// had (`createdAt`), seen now, a tag given twice kept once where it first appears.
    func stamped(_ installation: Installation, createdAt: Date?, sequence: UInt64, now: Date) throws -> (Installation, Data) {
        var stored = installation
        stored.createdAt = createdAt ?? now
        stored.lastSeen = now
        stored.version = sequence
        var seen = Set<String>()
        stored.tags = stored.tags.filter { seen.insert($0).inserted }
        return (stored, try encoder.encode(stored))
    }

    /// Installations written together (`upsert(all:)`) as they are stored once the sequence has
    /// moved on to `last` by their number, a sequence each in order, with their documents; their
    /// creation times are those of `storedDocuments`, the documents stored under their ids.
    func stamped(_ installations: [Installation], last: UInt64, storedDocuments: [Data], now: Date) throws
        -> [(installation: Installation, sequence: UInt64, document: Data)]
    {
        var created: [String: Date] = [:]
        for document in storedDocuments {
            let stored = try decoder.decode(Installation.self, from: document)
            created[stored.installationId] = stored.createdAt
        }
        return try installations.enumerated().map { offset, installation in
            let sequence = last - UInt64(installations.count - 1 - offset)
            let (stored, document) = try stamped(installation, createdAt: created[installation.installationId], sequence: sequence, now: now)
            return (stored, sequence, document)
        }
    }

    func upsert(_ installation: Installation, now: Date) throws -> (Installation, UInt64) {
        try transaction {
            let sequence = try nextSequence()
            let createdAt = try one(sql.stored, [installation.installationId]).map { try decode($0).createdAt } ?? now
            let (stored, document) = try stamped(installation, createdAt: createdAt, sequence: sequence, now: now)
            try run(sql.upsert, [stored.installationId, document, stored.userId, stored.expirationTime, now, stored.pushChannel])
            try run(sql.deleteTags, [stored.installationId])
            if !stored.tags.isEmpty { try insertTags(stored.tags, of: stored.installationId) }
            try indexEndpoints(of: stored)
            try log(sequence, stored.installationId, document)
            return (stored, sequence)
        }
    }

    /// Indexes the installation's push endpoints by their ids, its old ones dropped. An endpoint id
    /// is the hash of a random secret, so one held by another installation was copied from it:
    /// refused, so that nobody takes over an app's endpoint.
    private func indexEndpoints(of installation: Installation) throws {
        try run(sql.deleteEndpoints, [installation.installationId])
        for endpoint in (installation.endpoints ?? [:]).keys.sorted() {
            if try one(sql.endpointHolder, [endpoint]) != nil {
                throw HubError(.conflict, "push endpoint \(endpoint.prefix(12))… is held by another installation; make a new secret for it")
            }
            try run(sql.insertEndpoint, [endpoint, installation.installationId])
        }
    }

    func installation(holding endpoint: String, now: Date) throws -> Installation? {
        try one(sql.byEndpoint, [endpoint, now]).map(decode)
    }

    func delete(_ id: String) throws -> UInt64? {
        do {
            return try transaction {
                let sequence = try nextSequence()
                // Nothing deleted: the sequence goes back with the transaction.
                guard try run(sql.delete, [id]) > 0 else { throw NothingDeleted() }
                try log(sequence, id, nil)
                return sequence
            }
        } catch is NothingDeleted {
            return nil
        }
    }

    func purgeExpired(now: Date) throws -> [(String, UInt64)] {
        try transaction {
            var purged: [(String, UInt64)] = []
            for id in try query(sql.expired, [now]).map({ try $0.string("installation_id", of: "installations") }) {
                let sequence = try nextSequence()
                try run(sql.delete, [id])
                try log(sequence, id, nil)
                purged.append((id, sequence))
            }
            return purged
        }
    }

    func list(in scope: HubScope, tag: String?, pushChannel: String?, after: String?, limit: Int, now: Date) throws -> InstallationPage {
        var statement = "SELECT i.document FROM \(sql.installations) i"
        var values: [(any StoreValue)?] = []
        if let tag {
            values.append(tag)
            statement += " JOIN \(sql.tags) t ON t.installation_id = i.installation_id AND t.tag = $\(values.count)"
        }
        values += [after ?? "", now]
        statement += " WHERE i.installation_id\(sql.byteOrder) > $\(values.count - 1) AND (i.expires_at IS NULL OR i.expires_at > $\(values.count))"
        statement += " AND " + sql.owned(by: scope, column: "i.installation_id")
        if let pushChannel {
            values.append(pushChannel)
            statement += " AND i.push_channel = $\(values.count)"
        }
        values.append(limit + 1)
        statement += " ORDER BY i.installation_id\(sql.byteOrder) LIMIT $\(values.count)"
        return InstallationPage(fetched: try query(sql.spell(statement), values).map(decode), limit: limit)
    }

    func count(now: Date) throws -> Int { try oneRow(sql.count, [now]).int("n", of: "installations") }

    func snapshot(now: Date) throws -> RegistrySnapshot {
        try snapshot {
            let sequence = try sequence()
            let rows = try query(sql.snapshot, [now])
            return RegistrySnapshot(sequence: sequence, installations: try rows.map(decode))
        }
    }

    private func log(_ sequence: UInt64, _ id: String, _ document: Data?) throws {
        try run(sql.log, [Int64(sequence), id, document])
        try logged(sequence)
    }

    func changes(after sequence: UInt64, limit: Int) throws -> [InstallationChange] {
        try query(sql.changesAfter, [Int64(clamping: sequence), limit]).map { row in
            InstallationChange(
                sequence: try row.sequence("sequence", of: "changes"), installationId: try row.string("installation_id", of: "changes"),
                document: try row.optionalData("document", of: "changes"))
        }
    }

    func pruneChanges(keeping count: Int) throws { try run(sql.prune, [count]) }

    // MARK: The hub catalog

    func catalogVersion() throws -> UInt64 { try oneRow(sql.catalogVersion).sequence("version", of: "hub_catalog") }

    func hubCatalog() throws -> HubCatalog {
        try snapshot {
            let version = try catalogVersion()
            let hubs = try query(sql.hubs, []).map { try decoder.decode(HubDescription.self, from: try $0.data("document", of: "hubs")) }
            return HubCatalog(version: version, hubs: hubs)
        }
    }

    /// The generation of a hub made now under `name`: 1 the first time, one more each time after.
    func nextGeneration(of name: String) throws -> Int {
        try oneRow(sql.nextGeneration, [name.lowercased()]).int("generation", of: "hub_generations")
    }

    func saveHub(_ hub: HubDescription) throws -> UInt64 {
        try transaction {
            let version = try oneRow(sql.nextCatalogVersion).sequence("version", of: "hub_catalog")
            try run(sql.saveHub, [hub.name.lowercased(), try encoder.encode(hub)])
            return version
        }
    }

    /// Deletes a hub's catalog entry and every installation it owns, each logged as a change so
    /// that the dispatchers forget them. Returns the installations deleted.
    func deleteHub(_ scope: HubScope) throws -> Int {
        try transaction {
            _ = try oneRow(sql.nextCatalogVersion)
            try run(sql.deleteHub, [scope.name])
            let ids = try query(sql.spell("SELECT installation_id FROM \(sql.installations) WHERE \(sql.owned(by: scope, column: "installation_id"))"), [])
                .map { try $0.string("installation_id", of: "installations") }
            for id in ids {
                let sequence = try nextSequence()
                try run(sql.delete, [id])
                try log(sequence, id, nil)
            }
            return ids.count
        }
    }

    /// How many live installations a hub has.
    func count(in scope: HubScope, now: Date) throws -> Int {
        let statement = "SELECT count(*) AS n FROM \(sql.installations) WHERE (expires_at IS NULL OR expires_at > $1) AND "
            + sql.owned(by: scope, column: "installation_id")
        return try oneRow(sql.spell(statement), [now]).int("n", of: "installations")
    }

    /// The installation a row's document holds.
    private func decode(_ row: Row) throws -> Installation {
        try decoder.decode(Installation.self, from: try row.data("document", of: "installations"))
    }
}

private struct NothingDeleted: Error {}
