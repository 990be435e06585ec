import Auth
import Foundation
import HubProtocol
import ServiceKit
import Storage

ServiceMain.run(name: "nh-sync", summary: "the sync store: per-user notifications and their read and dismiss state") { context in
    let config = context.config
    context.prepareKeys()
    _ = context.userTokens
    let store = SyncStore(database: try context.openStore("sync.db", migrations: SyncSchema.migrations))
    let group = CommitGroup(database: store.database)
    let events = try context.bindEvents(config.sync.events ?? "tcp://127.0.0.1:7732", startingAfter: try store.streamSequence())
    var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
    let server = try context.bindRequests(config.sync.requests, group: group, endpoints: { endpoints }) {
        ["notifications": String((try? store.liveCount()) ?? 0), "sequence": String(events.sequence)]
    }
    endpoints["requests"] = server.endpoint

    /// Tells the dispatcher, and through it the user's other devices, that something changed —
    /// once the change is committed, so that a device that fetches at once finds it.
    func announce(_ change: SyncStore.Change, origin: String? = nil) throws {
        let event = UserNotificationsChanged(userId: change.userId, sequence: change.sequence, origin: origin)
        try group.afterCommit {
            try events.publish(
                topic: "user", sequence: change.streamSequence, body: HubCodec.encode(event, id: String(change.streamSequence)))
        }
    }

    server.on(PostUserNotification.self) { request in
        try context.authorize(request.auth, needs: .send)
        let now = Date()
        let expiresAt = try UserNotificationRules.validate(request.payload, defaultLifetime: config.defaultTimeToLive, now: now)
        let (notification, change) = try store.post(request.payload, expiresAt: expiresAt, now: now)
        try announce(change)
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
            payload.id, user: user, read: payload.readState, action: payload.userActionState, now: Date())
        if let change { try announce(change, origin: payload.device) }
        return UserNotificationReply(notification: notification)
    }
    server.on(DeleteUserNotification.self) { request in
        let user = try context.authorizeUser(request.auth)
        try announce(try store.delete(request.payload.id, user: user, now: Date()), origin: request.payload.device)
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

    context.loop.every(milliseconds: 1_000) {
        for change in try store.expire(now: Date()) {
            try announce(change)
        }
    }
}
