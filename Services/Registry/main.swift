import Auth
import Foundation
import HubProtocol
import Postgres
import ServiceKit

ServiceMain.run(name: "nh-registry", summary: "the registration service: installations, tags and templates") { context in
    let config = context.config
    let store: any InstallationStore = try context.chooseStore(
        schema: PostgresInstallationStore.schema, postgres: { try PostgresInstallationStore(url: $0) },
        sqlite: { SQLiteInstallationStore(database: try context.openStore("registry.db", migrations: SQLiteInstallationStore.migrations)) })
    context.prepareKeys()
    let events = try context.bindEvents(config.registry.events ?? "tcp://127.0.0.1:7702", startingAfter: try store.sequence())
    var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
    let server = try context.bindRequests(config.registry.requests, endpoints: { endpoints }) {
        ["installations": String((try? store.count(now: Date())) ?? 0), "sequence": String(events.sequence)]
    }
    endpoints["requests"] = server.endpoint

    /// Publishes what the log holds beyond what was published, in order: this process's changes
    /// and any other's that shares the store.
    func publishChanges() throws {
        while true {
            let changes = try store.changes(after: events.sequence, limit: 1_000)
            for change in changes {
                try events.publish(topic: "installation", sequence: change.sequence, body: HubCodec.encode(change.message, id: String(change.sequence)))
            }
            if changes.count < 1_000 { return }
        }
    }

    func found(_ id: String) throws -> Installation {
        guard let installation = try store.get(id, now: Date()) else {
            throw HubError(.notFound, "no installation '\(id)'")
        }
        return installation
    }

    func save(_ given: Installation, rights: AccessRights, userToken: String?) throws -> InstallationReply {
        let now = Date()
        var installation = given
        // Platform names come in any case (fcmV1, APNS); they are kept as the hub names them.
        installation.platform = Platform(name: given.platform)?.rawValue ?? given.platform
        try InstallationRules.validate(installation, now: now, maxTags: config.limits.tagsPerInstallation)
        let current = try store.get(installation.installationId, now: now)
        // Push endpoints are the agent's to give; a write without them (REST, a patch) keeps them.
        if installation.endpoints == nil, installation.platform == Platform.linux.rawValue, current?.platform == installation.platform {
            installation.endpoints = current?.endpoints
        }
        try InstallationRules.checkBinding(installation, current: current, mayRebind: rights.contains(.manage))
        try InstallationRules.checkUser(installation, current: current, mayClaim: rights.contains(.manage)) { () throws(HubError) in
            try context.authorizeUser(userToken)
        }
        let (stored, _) = try store.upsert(installation, now: now)
        try publishChanges()
        context.logger.debug("installation saved", ("id", stored.installationId), ("tags", stored.tags.joined(separator: ",")))
        return InstallationReply(installation: stored)
    }

    // Listen may create, read and delete installations; Manage may do everything.
    server.on(InstallationUpsert.self) { request in
        let key = try context.authorize(request.auth, needs: .listen)
        if let ifMatch = request.payload.ifMatch {
            let id = request.payload.installation.installationId
            guard let current = try store.get(id, now: Date()) else {
                throw HubError(.notFound, "no registration '\(id)' to update; leave out If-Match to create it")
            }
            guard current.matches(ifMatch: ifMatch) else {
                throw HubError(.preconditionFailed, "'\(id)' has changed: its ETag is \(current.etag), not \(ifMatch); read it again")
            }
        }
        return try save(request.payload.installation, rights: key.rights, userToken: request.payload.userToken)
    }
    server.on(InstallationPatch.self) { request in
        let key = try context.authorize(request.auth, needs: .listen)
        let current = try found(request.payload.installationId)
        return try save(
            try InstallationPatcher.apply(request.payload.operations, to: current), rights: key.rights, userToken: request.payload.userToken)
    }
    server.on(InstallationGet.self) { request in
        try context.authorize(request.auth, needs: .listen)
        return InstallationReply(installation: try found(request.payload.installationId))
    }
    server.on(InstallationDelete.self) { request in
        try context.authorize(request.auth, needs: .listen)
        let id = request.payload.installationId
        if let ifMatch = request.payload.ifMatch, let current = try store.get(id, now: Date()), !current.matches(ifMatch: ifMatch) {
            throw HubError(.preconditionFailed, "'\(id)' has changed: its ETag is \(current.etag), not \(ifMatch); read it again")
        }
        guard try store.delete(id) != nil else { throw HubError(.notFound, "no installation '\(id)'") }
        try publishChanges()
        return Ack()
    }
    server.on(InstallationList.self) { request in
        try context.authorize(request.auth, needs: .manage)
        let limit = request.payload.limit ?? 100
        guard (1...1000).contains(limit) else { throw HubError(.invalidArgument, "limit must be 1 to 1000") }
        return try store.list(
            tag: request.payload.tag, pushChannel: request.payload.pushChannel, after: request.payload.after, limit: limit, now: Date())
    }
    server.on(RegistrySnapshotRequest.self) { request in
        try context.authorize(request.auth, needs: .manage)
        return try store.snapshot(now: Date())
    }

    // Other registry processes sharing the store: PostgreSQL announces their changes (LISTEN/
    // NOTIFY), read here without waiting every 50 ms, and they are published in order. Every
    // heartbeat publishes whatever the log holds beyond the stream, in case a notice was missed.
    if store is PostgresInstallationStore, let url = config.store {
        let listener = try PostgresListener(url: url, channel: PostgresInstallationStore.notifyChannel)
        context.onShutdown { listener.close() }
        context.loop.every(milliseconds: 50) { if listener.poll() { try publishChanges() } }
        context.loop.every(milliseconds: config.heartbeatMs) { try publishChanges() }
    }

    // Expired installations stop receiving at once (reads skip them) and are purged here.
    context.loop.every(milliseconds: 5_000) {
        for (id, _) in try store.purgeExpired(now: Date()) { context.logger.info("installation expired", ("id", id)) }
        try publishChanges()
        // A reader further behind than this takes a snapshot, as after any gap.
        try store.pruneChanges(keeping: 100_000)
    }
}
