import Auth
import Foundation
import HubProtocol
import ServiceKit

/// The registry's requests: installations written, patched, read, deleted and listed, and the
/// snapshot the dispatchers start from. Listen may create, read and delete installations; Manage
/// may do everything. Each handler is a method, reachable in process; `install(on:)` serves them.
struct RegistryHandlers {
    let context: ServiceContext
    let store: any InstallationStore
    /// Publishes the change log beyond what was published, after each write.
    let publishChanges: () throws -> Void
    /// Each hub's installations, counted where a hub has a limit.
    var counts = HubInstallationCounts()

    func install(on server: HubServer) {
        server.on(InstallationUpsert.self) { try upsert($0) }
        server.on(InstallationPatch.self) { try patch($0) }
        server.on(InstallationGet.self) { try get($0) }
        server.on(InstallationByEndpoint.self) { try holding($0) }
        server.on(InstallationDelete.self) { try delete($0) }
        server.on(InstallationList.self) { try list($0) }
        server.on(RegistrySnapshotRequest.self) { try snapshot($0) }
    }

    func upsert(_ request: Envelope<InstallationUpsert>) throws -> InstallationReply {
        let key = try context.authorize(request.auth, hub: request.hub, needs: .listen)
        let scope = context.scope(request.hub)
        if let ifMatch = request.payload.ifMatch {
            let id = request.payload.installation.installationId
            guard let current = try store.get(scope.key(id), now: Date()) else {
                throw HubError(.notFound, "no registration '\(id)' to update; leave out If-Match to create it")
            }
            try Self.check(current.local(in: scope), ifMatch: ifMatch)
        }
        return try save(request.payload.installation, in: scope, rights: key.rights, userToken: request.payload.userToken)
    }

    func patch(_ request: Envelope<InstallationPatch>) throws -> InstallationReply {
        let key = try context.authorize(request.auth, hub: request.hub, needs: .listen)
        let scope = context.scope(request.hub)
        let current = try found(request.payload.installationId, in: scope)
        return try save(
            try InstallationPatcher.apply(request.payload.operations, to: current), in: scope, rights: key.rights,
            userToken: request.payload.userToken)
    }

    func get(_ request: Envelope<InstallationGet>) throws -> InstallationReply {
        let scope = try context.authorize(request, needs: .listen)
        return InstallationReply(installation: try found(request.payload.installationId, in: scope))
    }

    /// The installation holding a push endpoint, of whichever hub, keyed as stored: for the
    /// gateway, whose endpoint URLs name no installation. A namespace key only.
    func holding(_ request: Envelope<InstallationByEndpoint>) throws -> InstallationReply {
        try context.authorizeNamespace(request.auth, needs: .manage)
        guard let installation = try store.installation(holding: request.payload.endpoint, now: Date()) else {
            throw HubError(.notFound, "no installation holds push endpoint \(request.payload.endpoint.prefix(12))…")
        }
        return InstallationReply(installation: installation)
    }

    func delete(_ request: Envelope<InstallationDelete>) throws -> Ack {
        let scope = try context.authorize(request, needs: .listen)
        let id = request.payload.installationId
        if let ifMatch = request.payload.ifMatch, let current = try store.get(scope.key(id), now: Date()) {
            try Self.check(current.local(in: scope), ifMatch: ifMatch)
        }
        guard try store.delete(scope.key(id)) != nil else { throw HubError(.notFound, "no installation '\(id)'") }
        counts.removed(in: scope)
        try publishChanges()
        return Ack()
    }

    func list(_ request: Envelope<InstallationList>) throws -> InstallationPage {
        let scope = try context.authorize(request, needs: .manage)
        let limit = request.payload.limit ?? 100
        guard (1...1000).contains(limit) else { throw HubError(.invalidArgument, "limit must be 1 to 1000") }
        let page = try store.list(
            in: scope, tag: request.payload.tag, pushChannel: request.payload.pushChannel, after: request.payload.after.map(scope.key),
            limit: limit, now: Date())
        return InstallationPage(installations: page.installations.map { $0.local(in: scope) }, next: page.next.map(scope.id))
    }

    /// Every hub's installations, for the dispatchers: a namespace key only, since a hub's own
    /// Manage key reaches its own hub alone.
    func snapshot(_ request: Envelope<RegistrySnapshotRequest>) throws -> RegistrySnapshot {
        try context.authorizeNamespace(request.auth, needs: .manage)
        return try store.snapshot(now: Date())
    }

    // MARK: Shared steps

    private static func check(_ current: Installation, ifMatch: String) throws {
        guard current.matches(ifMatch: ifMatch) else {
            throw HubError(
                .preconditionFailed, "'\(current.installationId)' has changed: its ETag is \(current.etag), not \(ifMatch); read it again")
        }
    }

    /// The installation as its hub's clients know it.
    private func found(_ id: String, in scope: HubScope) throws -> Installation {
        guard let installation = try store.get(scope.key(id), now: Date()) else { throw HubError(.notFound, "no installation '\(id)'") }
        return installation.local(in: scope)
    }

    /// Checks and stores an installation as its hub's clients know it; answers it the same way.
    /// `creating`: only when there is none under its id. `publish`: the change goes out on the
    /// stream at once (a job publishes a batch's changes once it commits).
    func save(
        _ given: Installation, in scope: HubScope, rights: AccessRights, userToken: String?, creating: Bool = false, publish: Bool = true
    ) throws -> InstallationReply {
        let now = Date()
        let current = try store.get(scope.key(given.installationId), now: now)?.local(in: scope)
        let installation = try checked(given, current: current, in: scope, rights: rights, userToken: userToken, creating: creating, now: now)
        let (stored, _) = try store.upsert(installation.keyed(in: scope), now: now)
        if current == nil { counts.added(in: scope) }
        if publish { try publishChanges() }
        context.logger.debug("installation saved", ("id", stored.installationId), ("tags", stored.tags.joined(separator: ",")))
        return InstallationReply(installation: stored.local(in: scope))
    }

    /// An installation as it is to be stored over `current` (the live one under its id, as its
    /// hub's clients know it), once every rule lets it through; the hub's count takes a new one
    /// as a place it will fill.
    func checked(
        _ given: Installation, current: Installation?, in scope: HubScope, rights: AccessRights, userToken: String?, creating: Bool, now: Date
    ) throws -> Installation {
        var installation = given
        // Platform names come in any case (fcmV1, APNS); they are kept as the hub names them.
        installation.platform = Platform(name: given.platform)?.rawValue ?? given.platform
        try InstallationRules.validate(
            installation, now: now, maxTags: context.config.limits.tagsPerInstallation, wnsChannelDomain: context.config.push.wnsChannelDomain)
        if creating, current != nil {
            throw HubError(.conflict, "installation '\(installation.installationId)' exists; import it with ImportUpsertRegistrations to replace it")
        }
        // Push endpoints are the agent's to give; a write without them (REST, a patch) keeps them.
        if installation.endpoints == nil, installation.platform == Platform.linux.rawValue, current?.platform == installation.platform {
            installation.endpoints = current?.endpoints
        }
        if current == nil { try counts.checkRoom(in: scope, limit: context.hubs.limits(scope).installations, store: store, now: now) }
        try InstallationRules.checkBinding(installation, current: current, mayRebind: rights.contains(.manage))
        try InstallationRules.checkUser(installation, current: current, mayClaim: rights.contains(.manage)) { () throws(HubError) in
            try context.authorizeUser(userToken, in: scope)
        }
        return installation
    }
}

/// Each hub's installations, for its limit: counted from the store when first needed and every
/// minute after (other registry processes, and expiries, change them too), and kept in step with
/// this process's writes between. Hubs without a limit are never counted.
final class HubInstallationCounts {
    private var counts: [HubScope: (count: Int, at: Date)] = [:]

    /// Throws when `scope`'s hub holds `limit` installations or more (0: no limit).
    func checkRoom(in scope: HubScope, limit: Int, store: any InstallationStore, now: Date) throws {
        guard limit > 0 else { return }
        if counts[scope].map({ now.timeIntervalSince($0.at) > 60 }) ?? true { counts[scope] = (try store.count(in: scope, now: now), now) }
        let count = counts[scope]?.count ?? 0
        guard count < limit else {
            throw HubError(
                .forbidden,
                "hub '\(scope)' holds \(count) installations, its limit (limits.installationsPerHub, or the hub's own: nhctl hub limits); delete some first")
        }
    }

    func added(in scope: HubScope) { counts[scope]?.count += 1 }
    func removed(in scope: HubScope) { counts[scope]?.count -= 1 }
}
