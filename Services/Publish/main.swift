import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit

ServiceMain.run(name: "nh-publish", summary: "the publish service: accepts notifications from backends") { context in
    let config = context.config
    context.prepareKeys()
    let store = SQLitePublishStore(database: try context.openStore("publish.db", migrations: PublishSchema.migrations))
    // The stream tells dispatchers there is something to pull; the store is the truth.
    let events = try context.bindEvents(config.publish.events ?? "tcp://127.0.0.1:7712", startingAfter: try store.latestSequence())
    var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
    let rich = try SQLiteRichStore(database: store.database, directory: context.dataDirectory.appendingPathComponent("rich"))
    // Sends waiting at once share one commit; hints go out, and replies back, only after it.
    let group = CommitGroup(database: store.database)
    // Rich payloads travel base64 in the envelope, so this socket takes a third more than the payload limit.
    let server = try context.bindRequests(
        config.publish.requests, group: group, maxMessageBytes: max(config.maxMessageBytes, config.maxRichBytes / 3 * 4 + 65_536),
        endpoints: { endpoints }
    ) {
        ["latest": String(events.sequence), "richPayloads": String(rich.count)]
    }
    endpoints["requests"] = server.endpoint
    server.sizeHint = "a rich payload may be at most \(config.maxRichBytes) bytes (maxRichBytes), which travel base64-encoded"

    func accept(_ send: SendNotification, timeToLive: Int) throws -> AcceptedNotification {
        let (accepted, isNew) = try store.accept(send, timeToLive: timeToLive, now: Date())
        if isNew {
            try group.afterCommit {
                try events.publish(topic: "notification", sequence: accepted.sequence, body: Data(accepted.notificationId.utf8))
            }
            context.logger.debug("accepted", ("id", accepted.notificationId), ("sequence", accepted.sequence))
        }
        return accepted
    }

    server.on(SendNotification.self) { request in
        try context.authorize(request.auth, needs: .send)
        guard request.payload.rich == nil else {
            throw HubError(.invalidArgument, "'rich' is set by the hub; send rich payloads with rich.send")
        }
        let timeToLive = try SendRules.validate(request.payload, defaultTimeToLive: config.defaultTimeToLive, maxExpressionBytes: config.limits.expressionBytes)
        if let fireAt = request.payload.scheduledAt {
            return SendAccepted(notificationId: try store.schedule(request.payload, fireAt: fireAt, now: Date()), state: .scheduled)
        }
        return SendAccepted(notificationId: try accept(request.payload, timeToLive: timeToLive).notificationId, state: .enqueued)
    }
    server.on(CancelScheduledNotification.self) { request in
        try context.authorize(request.auth, needs: .send)
        try store.cancel(request.payload.notificationId)
        return Ack()
    }
    // Scheduled sends fire from the store, so one survives any restart and fires once.
    context.loop.every(milliseconds: 500) {
        let fired = try store.fireDue(now: Date()) {
            (try? SendRules.validate($0, defaultTimeToLive: config.defaultTimeToLive)) ?? config.defaultTimeToLive
        }
        for accepted in fired {
            try events.publish(topic: "notification", sequence: accepted.sequence, body: Data(accepted.notificationId.utf8))
            context.logger.info("scheduled send fired", ("id", accepted.notificationId))
        }
    }

    // Rich push: the payload is stored first, then the targets get a silent notification that
    // carries only its id, type and message; they fetch the bytes with the ticket their delivery holds.
    server.on(SendRichNotification.self) { request in
        try context.authorize(request.auth, needs: .send)
        let send = try RichRules.validate(request.payload, maxBytes: config.maxRichBytes)
        let timeToLive = try SendRules.validate(send, defaultTimeToLive: config.defaultTimeToLive, maxExpressionBytes: config.limits.expressionBytes)
        let expiresAt = Date().addingTimeInterval(TimeInterval(timeToLive))
        let richId = try rich.store(request.payload.payload, contentType: request.payload.contentType, expiresAt: expiresAt)
        var silent = send
        silent.rich = RichReference(
            richId: richId, richType: request.payload.richType, message: request.payload.message,
            contentType: request.payload.contentType, size: request.payload.payload.count)
        return RichAccepted(notificationId: try accept(silent, timeToLive: timeToLive).notificationId, richId: richId)
    }
    server.on(RichFetchRequest.self) { request in
        try context.authorize(request.auth, needs: .listen)
        let claims: UserTokens.Claims
        do {
            claims = try context.userTokens.verify(request.payload.ticket, kind: .ticket)
        } catch let error as AuthError {
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
    context.loop.every(milliseconds: 1_000) {
        let purged = try rich.purge(now: Date())
        if purged > 0 { context.logger.info("rich payloads expired", ("count", purged)) }
    }
    server.on(PendingNotificationsRequest.self) { request in
        try context.authorize(request.auth, needs: .manage)
        let limit = min(max(request.payload.limit ?? 100, 1), 1_000)
        return PendingNotifications(
            notifications: try store.pending(after: request.payload.after, limit: limit), latest: events.sequence)
    }
    server.on(OutcomeRequest.self) { request in
        try context.authorize(request.auth, needs: .send)
        if let (state, enqueuedAt) = try store.scheduledState(request.payload.notificationId) {
            return NotificationOutcome(notificationId: request.payload.notificationId, state: state, enqueuedAt: enqueuedAt)
        }
        guard let accepted = try store.find(request.payload.notificationId) else {
            throw HubError(.notFound, "no notification '\(request.payload.notificationId)'")
        }
        return NotificationOutcome(notificationId: accepted.notificationId, state: .enqueued, enqueuedAt: accepted.enqueuedAt)
    }
    // A user notification is stored by the sync store, and the reply comes once it is persisted
    // there. Posts are forwarded without waiting, so many can be in flight while this loop goes on.
    let sync = try HubForwarder(connect: config.sync.requests, timeoutMs: config.requestTimeoutMs) { context.serviceToken() }
    context.onShutdown { sync.close() }
    context.loop.watch(sync.socket) { try sync.receive() }
    context.loop.every(milliseconds: 100) { sync.expire() }
    server.onDeferred(PostUserNotification.self) { request, respond in
        try context.authorize(request.auth, needs: .send)
        sync.forward(request.payload) { result in
            if case .failure(let error) = result, error.code == .timeout {
                respond(.failure(HubError(.unavailable, "the sync store did not answer in time; posting again with the same appNotificationId is safe")))
            } else {
                respond(result)
            }
        }
    }
    context.loop.every(milliseconds: 60_000) {
        _ = try store.purge(before: Date().addingTimeInterval(-86_400))
    }
}
