import Auth
import Foundation
import HubProtocol
import ServiceKit

/// The publish service's requests: sends, scheduled and cancelled (Send), rich payloads stored and
/// fetched with their tickets, the dispatchers' pull (Manage) and the state of a send not planned
/// yet. Each handler is a method, reachable in process; `install(on:)` serves them.
struct PublishHandlers {
    let context: ServiceContext
    let store: any PublishStore
    let rich: any RichStore
    /// Stores a send durably and announces it once committed; the same idempotency key gives the
    /// first send back. The data, when given, is the send as the store encodes it.
    let accept: (SendNotification, Int, Data?) throws -> AcceptedNotification
    /// The last sequence announced on the stream.
    let latest: () -> UInt64
    /// Forwards a user notification to the sync store without waiting; nil where there is none.
    var sync: HubForwarder? = nil

    func install(on server: HubServer) {
        if let sync {
            server.onDeferred(PostUserNotification.self) { request, respond in
                let scope = try context.authorize(request, needs: .send)
                sync.forward(request.payload, hub: scope.envelopeHub) { respond(Self.posted($0)) }
            }
        }
        server.on(SendNotification.self, payloadJSON: { try send($0, payloadJSON: $1) })
        server.on(CancelScheduledNotification.self) { try cancel($0) }
        server.on(SendRichNotification.self) { try sendRich($0) }
        server.on(RichFetchRequest.self) { try fetchRich($0) }
        server.on(PendingNotificationsRequest.self) { try pending($0) }
        server.on(OutcomeRequest.self) { try outcome($0) }
    }

    private var config: HubConfig { context.config }

    /// The answer to a user notification's post, from the sync store's: the sync store stores it
    /// and answers once it is persisted; one that did not answer in time may still have, so the
    /// sender is told that posting again is safe.
    static func posted(_ result: Result<UserNotificationReply, HubError>) -> Result<UserNotificationReply, HubError> {
        guard case .failure(let error) = result, error.code == .timeout else { return result }
        return .failure(HubError(.unavailable, "the sync store did not answer in time; posting again with the same appNotificationId is safe"))
    }

    /// `payloadJSON`: the send as decoding encoded it again, which the store keeps as it is.
    func send(_ request: Envelope<SendNotification>, payloadJSON: Data? = nil) throws -> SendAccepted {
        let scope = try context.authorize(request, needs: .send)
        guard request.payload.rich == nil else {
            throw HubError(.invalidArgument, "'rich' is set by the hub; send rich payloads with rich.send")
        }
        guard request.payload.hub == nil else {
            throw HubError(.invalidArgument, "'hub' in a send is set by the hub; name the hub in the envelope's 'hub'")
        }
        try context.takeSend(scope)
        let timeToLive = try SendRules.validate(
            request.payload, defaultTimeToLive: config.defaultTimeToLive, maxExpressionBytes: config.limits.expressionBytes)
        // The default hub's send is stored as it came (and its bytes as they were read); another
        // hub's names its hub, and its idempotency key is the hub's own.
        let send = Self.scoped(request.payload, in: scope)
        let json = scope.isDefault ? payloadJSON : nil
        if let fireAt = send.scheduledAt {
            return SendAccepted(notificationId: try store.schedule(send, fireAt: fireAt, now: Date()), state: .scheduled)
        }
        return SendAccepted(notificationId: try accept(send, timeToLive, json).notificationId, state: .enqueued)
    }

    /// A send as the stores keep it: with its hub, and its idempotency key the hub's key.
    static func scoped(_ send: SendNotification, in scope: HubScope) -> SendNotification {
        guard !scope.isDefault else { return send }
        var scoped = send
        scoped.hub = scope.sendHub
        scoped.idempotencyKey = send.idempotencyKey.map(scope.key)
        return scoped
    }

    /// Whether a stored send is `scope`'s hub's.
    static func owns(_ scope: HubScope, _ send: SendNotification) -> Bool { HubScope(named: send.hub) == scope }

    func cancel(_ request: Envelope<CancelScheduledNotification>) throws -> Ack {
        let scope = try context.authorize(request, needs: .send)
        if let scheduled = try store.scheduledState(request.payload.notificationId), HubScope(named: scheduled.hub) != scope {
            throw HubError(.notFound, "no scheduled notification '\(request.payload.notificationId)'")
        }
        try store.cancel(request.payload.notificationId)
        return Ack()
    }

    /// The payload is stored first; then the targets get a silent notification that carries only
    /// its id, type and message, and fetch the bytes with the ticket their delivery holds.
    func sendRich(_ request: Envelope<SendRichNotification>) throws -> RichAccepted {
        let scope = try context.authorize(request, needs: .send)
        try context.takeSend(scope)
        let send = Self.scoped(try RichRules.validate(request.payload, maxBytes: config.maxRichBytes), in: scope)
        let timeToLive = try SendRules.validate(send, defaultTimeToLive: config.defaultTimeToLive, maxExpressionBytes: config.limits.expressionBytes)
        let expiresAt = Date().addingTimeInterval(TimeInterval(timeToLive))
        let richId = try rich.store(request.payload.payload, contentType: request.payload.contentType, expiresAt: expiresAt)
        var silent = send
        silent.rich = RichReference(
            richId: richId, richType: request.payload.richType, message: request.payload.message,
            contentType: request.payload.contentType, size: request.payload.payload.count, keyId: request.payload.keyId)
        return RichAccepted(notificationId: try accept(silent, timeToLive, nil).notificationId, richId: richId)
    }

    /// The ticket, which the dispatcher made for one installation of the notification's hub and
    /// one payload, is what proves the right; the key must still be of the hub the request names.
    func fetchRich(_ request: Envelope<RichFetchRequest>) throws -> RichPayload {
        let scope = try context.authorize(request, needs: .listen)
        let claims: UserTokens.Claims
        do {
            claims = try context.userTokens.verify(request.payload.ticket, kind: .ticket)
        } catch {
            throw HubError(.unauthorized, error.message)
        }
        guard claims.resource == request.payload.richId else {
            throw HubError(.forbidden, "this ticket is for another rich payload; only a notification's targets may fetch its payload")
        }
        guard HubScope.of(key: claims.user) == scope else {
            throw HubError(.forbidden, "this ticket is for an installation of another hub; fetch with a key of the notification's hub")
        }
        guard let payload = try rich.fetch(request.payload.richId, now: Date()) else {
            throw HubError(.notFound, "no rich payload '\(request.payload.richId)'; it may have expired")
        }
        return payload
    }

    /// Every hub's sends, for the dispatchers: a namespace key only.
    func pending(_ request: Envelope<PendingNotificationsRequest>) throws -> PendingNotifications {
        try context.authorizeNamespace(request.auth, needs: .manage)
        let limit = min(max(request.payload.limit ?? 100, 1), 1_000)
        return PendingNotifications(notifications: try store.pending(after: request.payload.after, limit: limit), latest: latest())
    }

    /// Fires the scheduled sends whose time has come, each checked again by the rules and limits as
    /// they stand now: one that no longer passes (they changed since it was scheduled) is
    /// abandoned, its outcome saying why, rather than sent under rules it does not meet.
    func fireScheduled(now: Date) throws -> FiredSends {
        try store.fireDue(now: now) { send throws(HubError) in
            // A send of a hub deleted since it was scheduled goes with its hub.
            guard context.hubs.has(HubScope(named: send.hub)) else {
                throw HubError(.notFound, "its hub '\(send.hub ?? "")' was deleted")
            }
            return try SendRules.validate(send, defaultTimeToLive: config.defaultTimeToLive, maxExpressionBytes: config.limits.expressionBytes)
        }
    }

    /// A send the dispatcher has not planned yet: scheduled, or enqueued.
    func outcome(_ request: Envelope<OutcomeRequest>) throws -> NotificationOutcome {
        let scope = try context.authorize(request, needs: .send)
        if let scheduled = try store.scheduledState(request.payload.notificationId) {
            guard HubScope(named: scheduled.hub) == scope else { throw HubError(.notFound, "no notification '\(request.payload.notificationId)'") }
            var outcome = NotificationOutcome(notificationId: request.payload.notificationId, state: scheduled.state, enqueuedAt: scheduled.enqueuedAt)
            outcome.reason = scheduled.reason
            return outcome
        }
        guard let accepted = try store.find(request.payload.notificationId), Self.owns(scope, accepted.send) else {
            throw HubError(.notFound, "no notification '\(request.payload.notificationId)'")
        }
        return NotificationOutcome(notificationId: accepted.notificationId, state: .enqueued, enqueuedAt: accepted.enqueuedAt)
    }
}
