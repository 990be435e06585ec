import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit

ServiceMain.run(name: "nh-dispatch", summary: "the dispatcher: resolves targets and delivers to client agents") { context in
    let config = context.config
    context.prepareKeys()
    let logger = context.logger
    let store = DispatchStore(database: try context.openStore("dispatch.db", migrations: DispatchSchema.migrations))
    var index = InstallationIndex()
    var resolver = TargetResolver()
    var sessions = AgentSessions()

    // The registry's change stream keeps the index current; a gap or a late start takes a snapshot.
    let registry = try context.client(config.registry.requests, policy: RetryPolicy(timeout: 1_000, attempts: 1))
    let replica = try CloneReplica(
        connect: config.registry.events ?? "tcp://127.0.0.1:7702",
        snapshot: {
            let snapshot = try registry.call(RegistrySnapshotRequest())
            index.replace(with: snapshot)
            logger.info("registry snapshot", ("sequence", snapshot.sequence), ("installations", index.count))
            return snapshot.sequence
        },
        apply: { message in index.apply(try HubCodec.decode(InstallationChanged.self, from: message.body).payload) })
    context.onShutdown { replica.close() }
    context.loop.watch(replica.socket) { try replica.pump() }

    var endpoints: [String: String] = [:]
    let server = try context.bindRequests(config.dispatch.requests, endpoints: { endpoints }) {
        [
            "installations": String(index.count), "registrySequence": replica.tracker.position.map(String.init) ?? "none",
            "cursor": String((try? store.cursor()) ?? 0), "agents": String(sessions.count),
        ].merging((try? store.totals()) ?? [:]) { $1 }
    }
    // Agents connect from other hosts: their channel is CURVE-encrypted, and only agents that know
    // this socket's public key can reach it.
    let channelKeys = try AgentChannelKeys.loadOrCreate(directory: URL(fileURLWithPath: config.dataDir, isDirectory: true))
    let agents = try context.bindRequests(
        config.dispatch.agents ?? "tcp://127.0.0.1:7722", role: "agents", curve: channelKeys, endpoints: { endpoints })
    endpoints["requests"] = server.endpoint
    endpoints["agents"] = agents.endpoint

    /// Sends deliveries to an installation's agent if it is connected.
    func send(_ deliveries: [AgentDelivery], to installationId: String) throws {
        guard !deliveries.isEmpty, let route = sessions.route(of: installationId) else { return }
        for var delivery in deliveries {
            // A rich delivery carries a ticket that lets this installation, and no other, fetch the payload.
            if let rich = delivery.rich {
                delivery.richTicket = context.userTokens.issue(
                    user: installationId, kind: .ticket, lifetime: max(60, Int(delivery.expiresAt.timeIntervalSinceNow) + 60),
                    resource: rich.richId
                ).token
            }
            try agents.push(delivery, to: route, id: delivery.deliveryId)
        }
        try store.markSent(deliveries, now: Date())
    }

    // Accepted notifications are pulled from the publish service after the stored cursor; its
    // stream only says when there is more, so a lost hint costs a heartbeat's delay, never a send.
    let publish = try context.client(config.publish.requests, policy: RetryPolicy(timeout: 1_000, attempts: 1))
    func pull() throws {
        guard replica.tracker.position != nil else { return }
        while true {
            try replica.pump()
            let batch = try publish.call(PendingNotificationsRequest(after: try store.cursor(), limit: 200))
            if batch.notifications.isEmpty { return }
            var touched = Set<String>()
            // One commit for the whole batch: the cursor moves past all of it or none of it.
            try store.database.transaction {
                for notification in batch.notifications {
                    let now = Date()
                    let plans = resolver.plan(notification, index: index, now: now)
                    try store.record(notification, plans: plans, now: now)
                    touched.formUnion(plans.map(\.installationId))
                    logger.debug("dispatched", ("id", notification.notificationId), ("targets", plans.count))
                }
            }
            for installationId in touched.sorted() where sessions.route(of: installationId) != nil {
                try send(try store.pending(for: installationId, now: Date(), .unsent), to: installationId)
            }
        }
    }
    let hints = try ZMQContext.shared.socket(.sub)
    try hints.setLinger(0)
    try hints.subscribe()
    try hints.connect(config.publish.events ?? "tcp://127.0.0.1:7712")
    context.onShutdown { hints.close() }
    context.loop.watch(hints) {
        var latest: UInt64 = 0
        while let frames = try hints.receive(wait: false) {
            if let message = try? SequencedMessage(frames: frames) { latest = max(latest, message.sequence) }
        }
        if latest > (try store.cursor()) { try pull() }
    }

    // The sync store's stream: a user's notifications changed, so signal that user's other devices.
    // A signal carries no content; a missed one is made up for by signalling every user agent.
    func signal(_ installation: Installation, sequence: UInt64) throws {
        guard let user = installation.userId, let route = sessions.route(of: installation.installationId) else { return }
        try agents.push(AgentSignal(userId: user, sequence: sequence), to: route, id: "signal")
    }
    let userChanges = try ZMQContext.shared.socket(.sub)
    try userChanges.setLinger(0)
    try userChanges.subscribe()
    try userChanges.connect(config.sync.events ?? "tcp://127.0.0.1:7732")
    context.onShutdown { userChanges.close() }
    var userTracker = SequenceTracker()
    context.loop.watch(userChanges) {
        while let frames = try userChanges.receive(wait: false) {
            guard let message = try? SequencedMessage(frames: frames) else { continue }
            if userTracker.position == nil { userTracker.reset(to: message.isHeartbeat ? message.sequence : message.sequence - 1) }
            switch userTracker.observe(message.sequence, heartbeat: message.isHeartbeat) {
            case .skip: continue
            case .resync:
                userTracker.reset(to: message.sequence)
                for id in sessions.byInstallation.keys.sorted() {
                    if let installation = index.installation(id) { try signal(installation, sequence: .max) }
                }
                logger.info("user change stream gap; signalled every user agent", ("at", message.sequence))
            case .apply:
                let change = try HubCodec.decode(UserNotificationsChanged.self, from: message.body).payload
                for installation in index.installations(ofUser: change.userId) where installation.installationId != change.origin {
                    try signal(installation, sequence: change.sequence)
                }
            }
        }
    }

    // The agent channel: hello (also the agent's heartbeat), acknowledgements, health.
    var welcomed: [(String, [Data])] = []
    agents.on(AgentHello.self) { request, route in
        try context.authorize(request.auth, needs: .listen)
        let id = request.payload.installationId
        let isNew = sessions.hello(installationId: id, route: route, now: Date())
        if isNew {
            logger.info("agent connected", ("installation", id))
            welcomed.append((id, route))
        }
        return AgentWelcome(installationId: id, pending: isNew ? try store.pending(for: id, now: Date()).count : 0)
    }
    agents.on(AgentAck.self) { request, route in
        try context.authorize(request.auth, needs: .listen)
        guard let id = sessions.installation(on: route) else {
            throw HubError(.unauthorized, "say agent.hello before acknowledging")
        }
        try store.acknowledge(request.payload.deliveryIds, installationId: id, now: Date())
        if let failures = request.payload.failures, !failures.isEmpty {
            try store.fail(failures, installationId: id, now: Date())
            for failure in failures { logger.warning("delivery failed", ("delivery", failure.deliveryId), ("reason", failure.reason)) }
        }
        return Ack()
    }
    context.loop.watch(agents.socket) {
        try agents.serve()
        // Everything pending goes out after the welcome, to agents that are new or came back.
        let batch = welcomed
        welcomed.removeAll()
        for (id, _) in batch { try send(try store.pending(for: id, now: Date()), to: id) }
    }

    server.on(OutcomeRequest.self) { request in
        try context.authorize(request.auth, needs: .send)
        guard let outcome = try store.outcome(request.payload.notificationId) else {
            throw HubError(.notFound, "the dispatcher has no notification '\(request.payload.notificationId)' yet")
        }
        return outcome
    }

    // Unacknowledged deliveries go out again; silent agents are forgotten; expired deliveries counted.
    let resendAfter = max(2.0, Double(config.heartbeatMs) * 3 / 1000)
    context.loop.every(milliseconds: config.heartbeatMs) {
        let now = Date()
        for id in sessions.drop(silentSince: now.addingTimeInterval(-resendAfter)) {
            logger.info("agent silent, dropped", ("installation", id))
        }
        for id in sessions.byInstallation.keys.sorted() {
            try send(try store.pending(for: id, now: now, .sentBefore(now.addingTimeInterval(-resendAfter))), to: id)
        }
        let expired = try store.expire(now: now)
        if expired > 0 { logger.info("deliveries expired", ("count", expired)) }
    }
}
