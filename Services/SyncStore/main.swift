import Auth
import Foundation
import HubProtocol
import Postgres
import ServiceKit
import Storage

ServiceMain.run(name: "nh-sync", summary: "the sync store: per-user notifications and their read and dismiss state") { context in
    let config = context.config
    context.prepareKeys()
    _ = context.userTokens
    let store: any UserNotificationStore = try context.chooseStore(
        schema: PostgresUserNotificationStore.schema, postgres: { try PostgresUserNotificationStore(url: $0) },
        sqlite: { SQLiteUserNotificationStore(database: try context.openStore("sync.db", migrations: SQLiteUserNotificationStore.migrations)) })
    let events = try context.bindEvents(config.sync.events ?? "tcp://127.0.0.1:7732", startingAfter: try store.streamSequence())
    var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
    let server = try context.bindRequests(config.sync.requests, group: store.commitGroup, endpoints: { endpoints }) {
        ["notifications": String((try? store.liveCount()) ?? 0), "sequence": String(events.sequence)]
    }
    endpoints["requests"] = server.endpoint

    /// Publishes what the log holds beyond what was published, in order: this process's changes
    /// and those of any other that shares the store.
    func publishChanges() throws {
        while true {
            let changes = try store.streamChanges(after: events.sequence, limit: 1_000)
            for change in changes {
                try events.publish(
                    topic: "user", sequence: change.streamSequence,
                    body: HubCodec.encode(change.message, id: String(change.streamSequence)))
            }
            if changes.count < 1_000 { return }
        }
    }

    /// Tells the dispatcher, and through it the user's other devices, that something changed —
    /// once the change is committed, so that a device that fetches at once finds it.
    func announce() throws {
        try store.afterCommit(publishChanges)
    }

    server.on(PostUserNotification.self) { request in
        try context.authorize(request.auth, needs: .send)
        let now = Date()
        let expiresAt = try UserNotificationRules.validate(request.payload, defaultLifetime: config.defaultTimeToLive, now: now)
        let (notification, _) = try store.post(request.payload, expiresAt: expiresAt, now: now)
        try announce()
        return UserNotificationReply(notification: notification)
    }
    server.on(UserChangesRequest.self) { request in
        let user = try context.authorizeUser(request.auth)
        let limit = request.payload.limit ?? 100
        guard (1...100).contains(limit) else { throw HubError(.invalidArgument, "limit must be 1 to 100") }
        return try store.changes(user: user, after: request.payload.cursor, limit: limit)
    }
    server.on(UserHistoryRequest.self) { request in
        try store.history(user: try context.authorizeUser(request.auth), now: Date())
    }
    server.on(UpdateUserNotificationState.self) { request in
        let user = try context.authorizeUser(request.auth)
        let payload = request.payload
        guard payload.readState != nil || payload.userActionState != nil else {
            throw HubError(.invalidArgument, "give readState, userActionState or both")
        }
        let (notification, change) = try store.update(
            payload.id, user: user, read: payload.readState, action: payload.userActionState, origin: payload.device, now: Date())
        if change != nil { try announce() }
        return UserNotificationReply(notification: notification)
    }
    server.on(DeleteUserNotification.self) { request in
        let user = try context.authorizeUser(request.auth)
        _ = try store.delete(request.payload.id, user: user, origin: request.payload.device, now: Date())
        try announce()
        return Ack()
    }
    server.on(IssueUserCredential.self) { request in
        try context.authorize(request.auth, needs: .manage)
        try UserNotificationRules.identifier(request.payload.userId, "userId")
        let lifetime = request.payload.lifetime ?? 365 * 86_400
        guard (60...5 * 365 * 86_400).contains(lifetime) else {
            throw HubError(.invalidArgument, "lifetime must be 60 seconds to 5 years")
        }
        let (credential, expiresAt) = context.userTokens.issue(user: request.payload.userId, kind: .credential, lifetime: lifetime)
        return UserCredential(userId: request.payload.userId, credential: credential, expiresAt: expiresAt)
    }
    server.on(UserTokenRequest.self) { request in
        let claims: UserTokens.Claims
        do {
            claims = try context.userTokens.verify(request.payload.credential, kind: .credential)
        } catch let error as AuthError {
            throw HubError(.unauthorized, error.message)
        }
        let (token, expiresAt) = context.userTokens.issue(user: claims.user, kind: .token, lifetime: config.userTokenLifetime)
        return UserToken(userId: claims.user, token: token, expiresAt: expiresAt)
    }

    // Other sync processes sharing the store: PostgreSQL announces their changes (LISTEN/NOTIFY),
    // read here without waiting every 50 ms, and they are published in order. Every heartbeat
    // publishes whatever the log holds beyond the stream, in case a notice was missed.
    if store is PostgresUserNotificationStore, let url = config.store {
        let listener = try PostgresListener(url: url, channel: PostgresUserNotificationStore.notifyChannel)
        context.onShutdown { listener.close() }
        context.loop.every(milliseconds: 50) { if listener.poll() { try publishChanges() } }
        context.loop.every(milliseconds: config.heartbeatMs) { try publishChanges() }
    }

    context.loop.every(milliseconds: 1_000) {
        if try !store.expire(now: Date()).isEmpty { try announce() }
    }
    // A reader further behind than this sees a gap, and signals every user's devices to fetch.
    context.loop.every(milliseconds: 60_000) { try store.pruneStream(keeping: 100_000) }
}
