import Auth
import Foundation
import HubProtocol
import ServiceKit

/// The namespace's hubs, kept by the registry: made, listed, read and deleted, their policies
/// added, changed and removed, their keys regenerated; and the catalog every service checks
/// credentials against. All need a namespace Manage key (`namespace-keys.json`), as Azure's hub
/// management needs the namespace's rights, never a hub's own.
struct HubHandlers {
    let context: ServiceContext
    let store: any InstallationStore
    /// Publishes the change log beyond what was published, after a hub's installations are deleted.
    let publishChanges: () throws -> Void

    func install(on server: HubServer) {
        server.on(HubCreate.self) { try create($0) }
        server.on(HubGet.self) { try get($0) }
        server.on(HubListRequest.self) { try list($0) }
        server.on(HubDelete.self) { try delete($0) }
        server.on(HubPolicyPut.self) { try putPolicy($0) }
        server.on(HubPolicyDelete.self) { try deletePolicy($0) }
        server.on(HubKeysRegenerate.self) { try regenerate($0) }
        server.on(HubLimitsPut.self) { try putLimits($0) }
        server.on(HubCatalogRequest.self) { try catalog($0) }
    }

    /// Reads the catalog into this registry's own directory when another process changed it.
    func refresh() throws {
        let version = try store.catalogVersion()
        guard version != context.hubs.version else { return }
        context.hubs.apply(try store.hubCatalog())
        context.bus.admitHubKeys(context.hubs.busKeys)
    }

    func create(_ request: Envelope<HubCreate>) throws -> HubDescription {
        try context.authorizeNamespace(request.auth, needs: .manage)
        let name = request.payload.name
        try HubName.check(name)
        try refresh()
        let scope = context.scope(name)
        guard !context.hubs.has(scope) else { throw HubError(.conflict, "the namespace has a hub '\(scope.name)' already") }
        let generation = try store.nextGeneration(of: name)
        let hub = HubDescription(
            name: name, createdAt: Date(), policies: KeyStore.defaultHubKeys().map(Self.policy), generation: generation > 1 ? generation : nil)
        try save(hub)
        context.logger.info("hub created", ("hub", name))
        return hub
    }

    func get(_ request: Envelope<HubGet>) throws -> HubDescription {
        try context.authorizeNamespace(request.auth, needs: .manage)
        return try described(request.payload.name)
    }

    func list(_ request: Envelope<HubListRequest>) throws -> HubList {
        try context.authorizeNamespace(request.auth, needs: .manage)
        try refresh()
        let now = Date()
        let defaultScope = context.scope(nil)
        var hubs = [HubSummary(
            name: context.config.hub, createdAt: nil, isDefault: true, installations: try store.count(in: defaultScope, now: now))]
        for hub in context.hubs.catalogHubs.sorted(by: { $0.name.lowercased() < $1.name.lowercased() }) {
            let scope = hub.scope(defaultHub: context.config.hub)
            if scope.isDefault {
                hubs[0].createdAt = hub.createdAt
                continue
            }
            hubs.append(HubSummary(name: hub.name, createdAt: hub.createdAt, isDefault: false, installations: try store.count(in: scope, now: now)))
        }
        return HubList(hubs: hubs)
    }

    func delete(_ request: Envelope<HubDelete>) throws -> Ack {
        try context.authorizeNamespace(request.auth, needs: .manage)
        let name = request.payload.name
        try refresh()
        let scope = context.scope(name)
        guard !scope.isDefault else {
            throw HubError(
                .invalidArgument,
                "'\(scope.name)' is the default hub, which the config names and clients without a hub reach; it cannot be deleted")
        }
        guard context.hubs.has(scope) else { throw HubError(.notFound, "no hub '\(name)' in this namespace") }
        let deleted = try store.deleteHub(scope)
        try refresh()
        try publishChanges()
        context.logger.info("hub deleted", ("hub", scope.name), ("installations", "\(deleted)"))
        return Ack()
    }

    func putPolicy(_ request: Envelope<HubPolicyPut>) throws -> HubPolicy {
        try context.authorizeNamespace(request.auth, needs: .manage)
        let payload = request.payload
        let rights: AccessRights
        do {
            rights = try AccessRights(names: payload.rights)
        } catch {
            throw HubError(.invalidArgument, error.message)
        }
        guard !rights.isEmpty else { throw HubError(.invalidArgument, "a policy needs at least one right: Listen, Send or Manage") }
        try Self.checkPolicyName(payload.name)
        var hub = try described(payload.hub)
        let policy: HubPolicy
        if let index = hub.policies.firstIndex(where: { $0.name == payload.name }) {
            hub.policies[index].rights = rights.names
            policy = hub.policies[index]
        } else {
            policy = Self.policy(AccessKey.generate(name: payload.name, rights: rights))
            hub.policies.append(policy)
        }
        try save(hub)
        return policy
    }

    func deletePolicy(_ request: Envelope<HubPolicyDelete>) throws -> Ack {
        try context.authorizeNamespace(request.auth, needs: .manage)
        var hub = try described(request.payload.hub)
        guard let index = hub.policies.firstIndex(where: { $0.name == request.payload.name }) else {
            throw HubError(.notFound, "hub '\(hub.name)' has no policy '\(request.payload.name)'")
        }
        hub.policies.remove(at: index)
        try save(hub)
        return Ack()
    }

    func regenerate(_ request: Envelope<HubKeysRegenerate>) throws -> HubPolicy {
        try context.authorizeNamespace(request.auth, needs: .manage)
        var hub = try described(request.payload.hub)
        guard let index = hub.policies.firstIndex(where: { $0.name == request.payload.name }) else {
            throw HubError(.notFound, "hub '\(hub.name)' has no policy '\(request.payload.name)'")
        }
        switch request.payload.policyKey.lowercased() {
        case "primarykey", "primary": hub.policies[index].key = AccessKey.newKey()
        case "secondarykey", "secondary": hub.policies[index].secondaryKey = AccessKey.newKey()
        default: throw HubError(.invalidArgument, "policyKey '\(request.payload.policyKey)' must be PrimaryKey or SecondaryKey")
        }
        try save(hub)
        context.logger.info("hub key regenerated", ("hub", hub.name), ("policy", request.payload.name), ("key", request.payload.policyKey))
        return hub.policies[index]
    }

    /// Sets the limits given (0 lifts one; one absent stays as it was).
    func putLimits(_ request: Envelope<HubLimitsPut>) throws -> HubDescription {
        try context.authorizeNamespace(request.auth, needs: .manage)
        let given = request.payload.limits
        for value in [given.requestsPerSecond, given.sendsPerSecond, given.installations].compactMap({ $0 }) where value < 0 {
            throw HubError(.invalidArgument, "a limit is 0 (none) or more, not \(value)")
        }
        var hub = try described(request.payload.hub)
        var limits = hub.limits ?? HubLimits()
        limits.requestsPerSecond = given.requestsPerSecond ?? limits.requestsPerSecond
        limits.sendsPerSecond = given.sendsPerSecond ?? limits.sendsPerSecond
        limits.installations = given.installations ?? limits.installations
        hub.limits = limits
        try save(hub)
        return hub
    }

    func catalog(_ request: Envelope<HubCatalogRequest>) throws -> HubCatalog {
        try context.authorizeNamespace(request.auth, needs: .manage)
        let version = try store.catalogVersion()
        if let after = request.payload.after, after == version { return HubCatalog(version: version, hubs: nil) }
        return try store.hubCatalog()
    }

    // MARK: Shared steps

    /// A hub with its policies: the catalog's entry, or for the default hub before its policies were
    /// changed, `keys.json`'s (given a secondary key when first written to the catalog).
    private func described(_ name: String) throws -> HubDescription {
        try refresh()
        let scope = context.scope(name)
        if let hub = context.hubs.catalogHubs.first(where: { $0.name.lowercased() == scope.name }) { return hub }
        guard scope.isDefault else { throw HubError(.notFound, "no hub '\(name)' in this namespace") }
        return HubDescription(name: context.config.hub, createdAt: Date(), policies: context.keys.keys.map(Self.policy))
    }

    private func save(_ hub: HubDescription) throws {
        _ = try store.saveHub(hub)
        try refresh()
    }

    static func policy(_ key: AccessKey) -> HubPolicy {
        HubPolicy(name: key.name, rights: key.rights.names, key: key.key, secondaryKey: key.secondaryKey ?? AccessKey.newKey())
    }

    /// Policy names as Azure's authorization rules: 1 to 256 letters, digits, '.', '-' and '_'.
    static func checkPolicyName(_ name: String) throws(HubError) {
        guard !name.isEmpty, name.utf8.count <= 256,
            name.utf8.allSatisfy({ HubName.isPolicyByte($0) })
        else {
            throw HubError(.invalidArgument, "policy name '\(name.prefix(60))' must be 1 to 256 letters, digits, '.', '-' and '_'")
        }
        guard name != AccessKey.rootManageName else {
            throw HubError(.invalidArgument, "'\(name)' is the namespace's own policy; choose another name")
        }
    }
}
