import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit

ServiceMain.run(name: "nh-publish", summary: "the publish service: accepts notifications from backends") { context in
    let config = context.config
    context.prepareKeys()
    let store = PublishStore(database: try context.openStore("publish.db", migrations: PublishSchema.migrations))
    // The stream tells dispatchers there is something to pull; the store is the truth.
    let events = try context.bindEvents(config.publish.events ?? "tcp://127.0.0.1:7712", startingAfter: try store.latestSequence())
    var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
    let server = try context.bindRequests(config.publish.requests, endpoints: { endpoints }) {
        ["latest": String(events.sequence)]
    }
    endpoints["requests"] = server.endpoint

    server.on(SendNotification.self) { request in
        try context.authorize(request.auth, needs: .send)
        let timeToLive = try SendRules.validate(request.payload, defaultTimeToLive: config.defaultTimeToLive)
        let (accepted, isNew) = try store.accept(request.payload, timeToLive: timeToLive, now: Date())
        if isNew {
            try events.publish(topic: "notification", sequence: accepted.sequence, body: Data(accepted.notificationId.utf8))
            context.logger.debug("accepted", ("id", accepted.notificationId), ("sequence", accepted.sequence))
        }
        return SendAccepted(notificationId: accepted.notificationId, state: .enqueued)
    }
    server.on(PendingNotificationsRequest.self) { request in
        try context.authorize(request.auth, needs: .manage)
        let limit = min(max(request.payload.limit ?? 100, 1), 1_000)
        return PendingNotifications(
            notifications: try store.pending(after: request.payload.after, limit: limit), latest: events.sequence)
    }
    server.on(OutcomeRequest.self) { request in
        try context.authorize(request.auth, needs: .send)
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
