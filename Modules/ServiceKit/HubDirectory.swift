import Auth
import Foundation
import HubProtocol
import Synchronization

/// The namespace's hubs as a service checks credentials against them: for each hub, the keys
/// that sign for it (its own policies and the namespace's), as the registry's hub catalog had
/// them when last read. The default hub's policies are `keys.json`'s until the catalog holds
/// them (once they are changed over the bus or REST). For any thread.
public final class HubDirectory: Sendable {
    public let defaultHub: String
    /// The namespace's policies (`namespace-keys.json`), which sign for every hub.
    public let namespaceKeys: KeyStore
    private let fileKeys: [AccessKey]
    private let state: Mutex<State>

    struct State {
        /// The catalog's version as last read; nil before the first read.
        var version: UInt64?
        /// By the hub's name in lower case.
        var hubs: [String: Entry] = [:]
        var defaultStore: KeyStore
        /// The bus client keys of every catalog policy.
        var busKeys: Set<String> = []
    }

    struct Entry {
        var description: HubDescription
        var scope: HubScope
        var store: KeyStore
        /// The bus client keys of its policies.
        var busKeys: Set<String>
    }

    /// The configuration's limits for every hub (`limits.…PerHub`).
    public let defaultLimits: HubLimits

    public init(defaultHub: String, fileKeys: KeyStore, namespaceKeys: KeyStore, defaultLimits: HubLimits = HubLimits()) {
        self.defaultHub = defaultHub
        self.fileKeys = fileKeys.keys
        self.namespaceKeys = namespaceKeys
        self.defaultLimits = defaultLimits
        state = Mutex(State(defaultStore: KeyStore(keys: fileKeys.keys + namespaceKeys.keys)))
    }

    /// The catalog's version as last read; nil before the first read.
    public var version: UInt64? { state.withLock { $0.version } }

    /// The scope of the hub a request names (nil: the default hub), in its generation as the
    /// catalog has it; a hub the catalog does not have is taken as a first generation (and has no keys).
    public func scope(_ hub: String?) -> HubScope {
        guard let hub, hub.lowercased() != defaultHub.lowercased() else { return HubScope(hub: nil, defaultHub: defaultHub) }
        let generation = state.withLock { $0.hubs[hub.lowercased()]?.description.generation } ?? 1
        return HubScope(hub: hub, defaultHub: defaultHub, generation: generation)
    }

    /// The key of an installation an agent names as `hub/id` by its hub's name (an agent knows no
    /// generation), in the hub's current generation; a bare id (the default hub's) as it is.
    public func installationKey(_ named: String) -> String {
        guard let hub = HubScope.hub(ofKey: named) else { return named }
        return scope(String(hub)).key(HubScope(named: String(hub)).id(named))
    }

    /// The keys that sign for the hub of `scope`: `not_found` for a hub the namespace does not
    /// have (or no longer has in that generation), `unavailable` before the catalog was first read
    /// (for any hub but the default).
    public func keys(for scope: HubScope) throws(HubError) -> KeyStore {
        let found: KeyStore?
        let version: UInt64?
        (found, version) = state.withLock { state in
            if scope.isDefault { return (state.hubs[defaultHub.lowercased()]?.store ?? state.defaultStore, state.version) }
            guard let entry = state.hubs[scope.name], entry.scope == scope else { return (nil, state.version) }
            return (entry.store, state.version)
        }
        if let found { return found }
        guard version != nil else {
            throw HubError(.unavailable, "the hub catalog has not been read from the registry yet; retry in a second")
        }
        throw HubError(.notFound, "no hub '\(scope.name)' in this namespace; nhctl hub list shows its hubs")
    }

    /// A hub's limits in force: its own where it has them, else the configuration's; 0 is none.
    public func limits(_ scope: HubScope) -> (requestsPerSecond: Int, sendsPerSecond: Int, installations: Int) {
        let own = state.withLock { $0.hubs[scope.isDefault ? defaultHub.lowercased() : scope.name]?.description.limits }
        return (
            own?.requestsPerSecond ?? defaultLimits.requestsPerSecond ?? 0, own?.sendsPerSecond ?? defaultLimits.sendsPerSecond ?? 0,
            own?.installations ?? defaultLimits.installations ?? 0
        )
    }

    /// Whether the namespace has the hub of `scope`, in that generation, as far as this service knows.
    public func has(_ scope: HubScope) -> Bool {
        scope.isDefault || state.withLock { $0.hubs[scope.name]?.scope == scope }
    }

    /// The hubs the catalog holds (not the default hub unless its policies were changed).
    public var catalogHubs: [HubDescription] { state.withLock { $0.hubs.values.map(\.description) } }

    /// The bus client keys of the catalog's policies, for the ZAP handler.
    public var busKeys: Set<String> { state.withLock { $0.busKeys } }

    /// The policies that sign for `scope`'s hub alone (without the namespace's).
    public func policies(of scope: HubScope) -> [AccessKey]? {
        state.withLock { state in
            if let entry = state.hubs[scope.isDefault ? defaultHub.lowercased() : scope.name], entry.scope == scope {
                return entry.description.policies.compactMap(Self.accessKey)
            }
            return scope.isDefault ? fileKeys : nil
        }
    }

    /// Takes a catalog the registry answered; returns whether anything changed. A hub whose entry
    /// did not change keeps what was made for it (its key store, with the tokens it checked, and
    /// its bus keys, each a curve multiplication), so a change to one hub costs one hub's work.
    @discardableResult
    public func apply(_ catalog: HubCatalog) -> Bool {
        guard let hubs = catalog.hubs else {
            state.withLock { $0.version = catalog.version }
            return false
        }
        let previous = state.withLock { $0.hubs }
        var entries: [String: Entry] = [:]
        entries.reserveCapacity(hubs.count)
        for hub in hubs {
            let name = hub.name.lowercased()
            if let kept = previous[name], kept.description == hub {
                entries[name] = kept
                continue
            }
            let policies = hub.policies.compactMap(Self.accessKey)
            // A policy whose key cannot make a bus key (never one the registry made) reaches REST alone.
            entries[name] = Entry(
                description: hub, scope: hub.scope(defaultHub: defaultHub), store: KeyStore(keys: policies + namespaceKeys.keys),
                busKeys: (try? BusSecurity.admitted(by: policies)) ?? [])
        }
        var busKeys: Set<String> = []
        for entry in entries.values { busKeys.formUnion(entry.busKeys) }
        return state.withLock { state in
            let changed = state.version != catalog.version
            state.version = catalog.version
            state.hubs = entries
            state.busKeys = busKeys
            return changed
        }
    }

    /// A catalog policy as a key; nil for rights this build does not know.
    static func accessKey(_ policy: HubPolicy) -> AccessKey? { policy.accessKey }

    /// Calls `removed` on the loop, every 2 s, for each hub the catalog has lost since the last look
    /// (a hub deleted), so that a service lets go of what it keeps for it.
    public func watchRemovals(loop: EventLoop, _ removed: @escaping (HubScope) throws -> Void) {
        var known: Set<HubScope>?
        loop.every(milliseconds: 2_000) { [self] in
            guard version != nil else { return }
            let now = Set(catalogHubs.map { $0.scope(defaultHub: defaultHub) })
            for gone in (known ?? now).subtracting(now) { try removed(gone) }
            known = now
        }
    }
}

extension HubPolicy {
    /// The policy as a key; nil for rights this build does not know.
    public var accessKey: AccessKey? {
        guard let rights = try? AccessRights(names: rights) else { return nil }
        return AccessKey(name: name, key: key, rights: rights, secondaryKey: secondaryKey)
    }

    /// The policy's two connection strings for `hub` at the namespace's `endpoint`, with `EntityPath`.
    public func connectionStrings(endpoint: String, hub: String) -> (primary: String, secondary: String) {
        let key = AccessKey(name: name, key: key, rights: [], secondaryKey: secondaryKey)
        return (key.connectionString(endpoint: endpoint, hub: hub), key.connectionString(endpoint: endpoint, hub: hub, secondary: true))
    }
}
