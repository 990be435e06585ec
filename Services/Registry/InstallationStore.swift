import Foundation
import HubProtocol

/// The registry's store: installations, their tags, and the change stream's sequence and log.
/// Two engines implement it: SQLite, embedded, the default; and PostgreSQL, which several
/// registry processes can share. The contract tests (RegistryTests) hold both to the same behaviour.
protocol InstallationStore: JobStore {
    /// The sequence of the last change.
    func sequence() throws -> UInt64
    /// A live installation, or nil when there is none or it has expired.
    func get(_ id: String, now: Date) throws -> Installation?
    /// Creates or replaces an installation, keeping its creation time. Returns it as stored (its
    /// `version` is the change's sequence) and the change's sequence.
    func upsert(_ installation: Installation, now: Date) throws -> (Installation, UInt64)
    /// Each of `ids` that is live, by its key, read at once.
    func live(_ ids: [String], now: Date) throws -> [String: Installation]
    /// Creates or replaces installations as `upsert` does each, in one transaction; on an engine
    /// where a statement can take many rows, with a statement for many. Their ids are distinct,
    /// and none holds push endpoints (those go through `upsert`, which checks them).
    func upsert(all installations: [Installation], now: Date) throws
    /// The live installation that holds the push endpoint whose id is `endpoint`, keyed as stored.
    func installation(holding endpoint: String, now: Date) throws -> Installation?
    /// Deletes an installation. Returns the change's sequence, or nil when there was none.
    func delete(_ id: String) throws -> UInt64?
    /// Deletes installations whose expiration time has passed; returns each id with its change's sequence.
    func purgeExpired(now: Date) throws -> [(String, UInt64)]
    /// A page of one hub's live installations in id order, optionally only those with `tag` and/or `pushChannel`.
    func list(in scope: HubScope, tag: String?, pushChannel: String?, after: String?, limit: Int, now: Date) throws -> InstallationPage
    func count(now: Date) throws -> Int
    /// Every live installation and the sequence they stand at, read at one point in time.
    func snapshot(now: Date) throws -> RegistrySnapshot
    /// Logged changes after `sequence`, in order, at most `limit`. The stream is published from
    /// here, so that every registry process sharing a store publishes every change, in order.
    func changes(after sequence: UInt64, limit: Int) throws -> [InstallationChange]
    /// Forgets logged changes but the latest `count`; a reader further behind takes a snapshot.
    func pruneChanges(keeping count: Int) throws
    /// The hub catalog: its version and every hub with policies of its own.
    func hubCatalog() throws -> HubCatalog
    func catalogVersion() throws -> UInt64
    /// The generation of a hub made now under `name` (see `HubScope`).
    func nextGeneration(of name: String) throws -> Int
    /// Writes a hub's entry; returns the catalog's new version.
    func saveHub(_ hub: HubDescription) throws -> UInt64
    /// Deletes a hub's entry and its installations (see the engine); returns how many.
    func deleteHub(_ scope: HubScope) throws -> Int
    func count(in scope: HubScope, now: Date) throws -> Int
}

/// One logged change: the installation as stored (its document, as the store's encoder wrote it),
/// or nil when it was deleted.
struct InstallationChange: Equatable {
    var sequence: UInt64
    var installationId: String
    var document: Data?

    init(sequence: UInt64, installationId: String, document: Data?) {
        self.sequence = sequence
        self.installationId = installationId
        self.document = document
    }

    /// The installation, decoded.
    var installation: Installation? {
        get throws { try document.map { try HubCodec.makeDecoder().decode(Installation.self, from: $0) } }
    }

    /// The change as its stream publishes it, written around the stored document.
    var body: Data {
        HubCodec.encode(InstallationChanged.self, payload: InstallationChanged.payload(installationId: installationId, document: document), id: String(sequence))
    }
}

extension InstallationStore {
    /// A page of the default hub's installations.
    func list(tag: String?, pushChannel: String?, after: String?, limit: Int, now: Date) throws -> InstallationPage {
        try list(in: HubScope(named: nil), tag: tag, pushChannel: pushChannel, after: after, limit: limit, now: now)
    }
}

extension InstallationPage {
    /// A page from `limit + 1` rows fetched in id order: the extra one, when there, says there is a
    /// next page, which starts after the last one kept.
    init(fetched: [Installation], limit: Int) {
        let kept = Array(fetched.prefix(limit))
        self.init(installations: kept, next: fetched.count > limit ? kept.last?.installationId : nil)
    }
}
