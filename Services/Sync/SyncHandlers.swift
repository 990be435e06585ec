import Auth
import Foundation
import HubProtocol
import ServiceKit

/// The sync store's requests: an app server's posts for a user (Send), a user's changes, history,
/// state changes and deletes (the user's token), credentials (Manage) and the trade of a
/// credential for a token. Each handler is a method, reachable in process; `install(on:)` serves them.
struct SyncHandlers {
    let context: ServiceContext
    let store: any UserNotificationStore
    /// Tells the dispatcher, and through it the user's other devices, that something changed:
    /// once the change is committed, so that a device that fetches at once finds it.
    let announce: () throws -> Void

    func install(on server: HubServer) {
        server.on(PostUserNotification.self) { try post($0) }
        server.on(UserChangesRequest.self) { try changes($0) }
        server.on(UserHistoryRequest.self) { try history($0) }
        server.on(UpdateUserNotificationState.self) { try update($0) }
        server.on(DeleteUserNotification.self) { try delete($0) }
        server.on(IssueUserCredential.self) { try credential($0) }
        server.on(UserTokenRequest.self) { try token($0) }
        server.on(UserKeyRequest.self) { try key($0) }
        server.on(PutUserKey.self) { try putKey($0) }
        server.on(UserPairingRequest.self) { try pairing($0) }
    }

    var vault: UserVault { UserVault(store: store) }

    /// A user is of one hub: the store keys them by the hub's key of their id (`HubScope`), and a
    /// user token names that key, so every request below reaches its own hub's user alone.
    func post(_ request: Envelope<PostUserNotification>) throws -> UserNotificationReply {
        let scope = try context.authorize(request, needs: .send)
        let now = Date()
        let expiresAt = try UserNotificationRules.validate(request.payload, defaultLifetime: context.config.defaultTimeToLive, now: now)
        let user = scope.key(request.payload.userId)
        try vault.checkPost(request.payload, user: user)
        let (notification, _) = try store.post(request.payload, user: user, expiresAt: expiresAt, now: now)
        try announce()
        return UserNotificationReply(notification: notification)
    }

    func changes(_ request: Envelope<UserChangesRequest>) throws -> UserChanges {
        let user = try context.authorizeUser(request.auth, hub: request.hub).key
        let limit = request.payload.limit ?? 100
        guard (1...100).contains(limit) else { throw HubError(.invalidArgument, "limit must be 1 to 100") }
        return try store.changes(user: user, after: request.payload.cursor, limit: limit)
    }

    func history(_ request: Envelope<UserHistoryRequest>) throws -> UserHistory {
        try store.history(user: try context.authorizeUser(request.auth, hub: request.hub).key, now: Date())
    }

    func update(_ request: Envelope<UpdateUserNotificationState>) throws -> UserNotificationReply {
        let user = try context.authorizeUser(request.auth, hub: request.hub).key
        let payload = request.payload
        guard payload.readState != nil || payload.userActionState != nil else {
            throw HubError(.invalidArgument, "give readState, userActionState or both")
        }
        let (notification, change) = try store.update(
            payload.id, user: user, read: payload.readState, action: payload.userActionState, origin: payload.device, now: Date())
        if change != nil { try announce() }
        return UserNotificationReply(notification: notification)
    }

    func delete(_ request: Envelope<DeleteUserNotification>) throws -> Ack {
        let user = try context.authorizeUser(request.auth, hub: request.hub).key
        _ = try store.delete(request.payload.id, user: user, origin: request.payload.device, now: Date())
        try announce()
        return Ack()
    }

    func credential(_ request: Envelope<IssueUserCredential>) throws -> UserCredential {
        let scope = try context.authorize(request, needs: .manage)
        try UserNotificationRules.identifier(request.payload.userId, "userId")
        let lifetime = request.payload.lifetime ?? 365 * 86_400
        guard (60...5 * 365 * 86_400).contains(lifetime) else {
            throw HubError(.invalidArgument, "lifetime must be 60 seconds to 5 years")
        }
        let (credential, expiresAt) = context.userTokens.issue(user: scope.key(request.payload.userId), kind: .credential, lifetime: lifetime)
        return UserCredential(userId: request.payload.userId, credential: credential, expiresAt: expiresAt)
    }

    func token(_ request: Envelope<UserTokenRequest>) throws -> UserToken {
        let claims: UserTokens.Claims
        do {
            claims = try context.userTokens.verify(request.payload.credential, kind: .credential)
        } catch {
            throw HubError(.unauthorized, error.message)
        }
        // A credential is of one hub's user; the request must name that hub (none: the default hub).
        let owner = HubScope.of(key: claims.user)
        guard context.scope(request.hub) == owner else {
            throw HubError(.unauthorized, "the credential is of a user of hub '\(owner)', not of hub '\(context.scope(request.hub))'")
        }
        guard context.hubs.has(owner) else { throw HubError(.unauthorized, "the credential's hub '\(owner)' is gone") }
        let (token, expiresAt) = context.userTokens.issue(user: claims.user, kind: .token, lifetime: context.config.userTokenLifetime)
        return UserToken(userId: owner.id(claims.user), token: token, expiresAt: expiresAt)
    }

    /// A backend (Send) reads a user's public key; a user (their token) reads their own, with the
    /// devices, the recovery record and this device's envelope.
    func key(_ request: Envelope<UserKeyRequest>) throws -> UserKey {
        if let userId = request.payload.userId {
            let scope = try context.authorize(request, needs: .send)
            try UserNotificationRules.identifier(userId, "userId")
            return try vault.key(user: scope.key(userId), userId: userId, own: false, device: nil)
        }
        let (user, scope) = try context.authorizeUser(request.auth, hub: request.hub)
        return try vault.key(user: user, userId: scope.id(user), own: true, device: request.payload.device)
    }

    func putKey(_ request: Envelope<PutUserKey>) throws -> UserKey {
        let (user, scope) = try context.authorizeUser(request.auth, hub: request.hub)
        return try vault.putKey(request.payload, user: user, userId: scope.id(user))
    }

    func pairing(_ request: Envelope<UserPairingRequest>) throws -> UserPairing {
        let user = try context.authorizeUser(request.auth, hub: request.hub).key
        return try vault.pairing(request.payload, user: user)
    }
}
