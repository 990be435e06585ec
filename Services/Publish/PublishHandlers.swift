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
                try context.authorize(request.auth, needs: .send)
                sync.forward(request.payload) { respond(Self.posted($0)) }
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
        try context.authorize(request.auth, needs: .send)
        guard request.payload.rich == nil else {
            throw HubError(.invalidArgument, "'rich' is set by the hub; send rich payloads with rich.send")
        }
        let timeToLive = try SendRules.validate(
            request.payload, defaultTimeToLive: config.defaultTimeToLive, maxExpressionBytes: config.limits.expressionBytes)
        if let fireAt = request.payload.scheduledAt {
            return SendAccepted(notificationId: try store.schedule(request.payload, fireAt: fireAt, now: Date()), state: .scheduled)
        }
        return SendAccepted(notificationId: try accept(request.payload, timeToLive, payloadJSON).notificationId, state: .enqueued)
    }

    func cancel(_ request: Envelope<CancelScheduledNotification>) throws -> Ack {
        try context.authorize(request.auth, needs: .send)
        try store.cancel(request.payload.notificationId)
        return Ack()
    }

    /// The payload is stored first; then the targets get a silent notification that carries only
    /// its id, type and message, and fetch the bytes with the ticket their delivery holds.
    func sendRich(_ request: Envelope<SendRichNotification>) throws -> RichAccepted {
        try context.authorize(request.auth, needs: .send)
        let send = try RichRules.validate(request.payload, maxBytes: config.maxRichBytes)
        let timeToLive = try SendRules.validate(send, defaultTimeToLive: config.defaultTimeToLive, maxExpressionBytes: config.limits.expressionBytes)
        let expiresAt = Date().addingTimeInterval(TimeInterval(timeToLive))
        let richId = try rich.store(request.payload.payload, contentType: request.payload.contentType, expiresAt: expiresAt)
        var silent = send
        silent.rich = RichReference(
            richId: richId, richType: request.payload.richType, message: request.payload.message,
            contentType: request.payload.contentType, size: request.payload.payload.count)
        return RichAccepted(notificationId: try accept(silent, timeToLive, nil).notificationId, richId: richId)
    }

    func fetchRich(_ request: Envelope<RichFetchRequest>) throws -> RichPayload {
        try context.authorize(request.auth, needs: .listen)
        let claims: UserTokens.Claims
        do {
            claims = try context.userTokens.verify(request.payload.ticket, kind: .ticket)
        } catch {
            throw HubError(.unauthorized, error.message)
        }
        guard claims.resource == request.payload.richId else {
            throw HubError(.forbidden, "this ticket is for another rich payload; only a notification's targets may fetch its payload")
        }
        guard let payload = try rich.fetch(request.payload.richId, now: Date()) else {
            throw HubError(.notFound, "no rich payload '\(request.payload.richId)'; it may have expired")
        }
        return payload
    }

    func pending(_ request: Envelope<PendingNotificationsRequest>) throws -> PendingNotifications {
        try context.authorize(request.auth, needs: .manage)
        let limit = min(max(request.payload.limit ?? 100, 1), 1_000)
        return PendingNotifications(notifications: try store.pending(after: request.payload.after, limit: limit), latest: latest())
    }

    /// Fires the scheduled sends whose time has come, each checked again by the rules and limits as
    /// they stand now: one that no longer passes (they changed since it was scheduled) is
    /// abandoned, its outcome saying why, rather than sent under rules it does not meet.
    func fireScheduled(now: Date) throws -> FiredSends {
        try store.fireDue(now: now) { send throws(HubError) in
            try SendRules.validate(send, defaultTimeToLive: config.defaultTimeToLive, maxExpressionBytes: config.limits.expressionBytes)
        }
    }

    /// A send the dispatcher has not planned yet: scheduled, or enqueued.
    func outcome(_ request: Envelope<OutcomeRequest>) throws -> NotificationOutcome {
        try context.authorize(request.auth, needs: .send)
        if let scheduled = try store.scheduledState(request.payload.notificationId) {
            var outcome = NotificationOutcome(notificationId: request.payload.notificationId, state: scheduled.state, enqueuedAt: scheduled.enqueuedAt)
            outcome.reason = scheduled.reason
            return outcome
        }
        guard let accepted = try store.find(request.payload.notificationId) else {
            throw HubError(.notFound, "no notification '\(request.payload.notificationId)'")
        }
        return NotificationOutcome(notificationId: accepted.notificationId, state: .enqueued, enqueuedAt: accepted.enqueuedAt)
    }
}
