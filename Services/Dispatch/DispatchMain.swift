import Auth
import Bus
import DispatchCore
import Foundation
import HubProtocol
import Push
import ServiceKit
import Storage

/// `nh-dispatch`'s entry point, called by its executable and by `nh-services` (Services/Executables).
public enum DispatchMain {
    public static func main(_ arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> Never {
        // The shell around `Dispatcher`: it turns socket traffic, timers and store answers into events,
        // and carries out the actions that come back. Each turn's writes go into a group of writes that
        // is committed every 50 ms.
        //
        // Two I/O threads share the agents' CURVE handshakes and encryption; set before any socket exists.
        ZMQContext.shared.setIOThreads(2)

        ServiceMain.run(
            name: "nh-dispatch", summary: "the dispatcher: resolves targets and delivers to client agents", arguments: arguments,
            check: { config in try PushCenter.check(settings: config.push, dataDir: config.dataDir) }
        ) { context in
            let config = context.config
            context.prepareKeys()
            let logger = context.logger
            var settings = DispatcherSettings(agentHeartbeat: Double(config.agentHeartbeatMs) / 1000, maxAgents: config.limits.agents)
            // Each agent may send so many messages a second; beyond that they are refused, not read.
            let inbox = AgentInbox(messagesPerSecond: config.limits.agentMessagesPerSecond)
            // Phones and browsers: each platform's push service, on a thread of its own for HTTP, with
            // its answers handled on this loop after the writes of the turn they come in.
            var afterAnswers: () -> Void = {}
            let mailbox = try context.loop.mailbox { afterAnswers() }
            let push: PushCenter
            do {
                push = try PushCenter(settings: config.push, dataDir: config.dataDir, post: { mailbox.post($0) })
            } catch {
                throw ConfigError("\(error)")
            }
            context.onShutdown { push.stop() }
            settings.platforms.formUnion(push.platforms.map(\.rawValue))
            if !push.platforms.isEmpty {
                logger.info("push services", ("platforms", push.platforms.map(\.rawValue).sorted().joined(separator: ",")))
            }
            var core = Dispatcher(settings: settings)
            var turn = DispatchTurn()
            var sendsBlocked = 0

            // Agents connect from other hosts. Their channel is CURVE-encrypted; each connection is
            // authenticated once, at its handshake, and every message on it carries the agent's key.
            // The hub's bus key serves this socket too; its ZAP domain lets any agent key through the
            // handshake, and a hello is then accepted only for an installation bound to that key.
            guard let security = BusSecurity.current, let busKeys = security.serverKeys else { throw ConfigError("the bus is not secured") }
            let agentEndpoint = config.dispatch.agents ?? "tcp://127.0.0.1:7722"
            guard !agentEndpoint.contains(",") else {
                throw ConfigError("dispatch.agents '\(agentEndpoint)' lists several endpoints; a dispatcher binds one (agents may be given several)")
            }
            let agents = try ZMQSocket.agentServer(bind: agentEndpoint, keys: busKeys, config: config)
            context.onShutdown { agents.close() }
            logger.info("listening", ("role", "agents"), ("endpoint", agents.lastEndpoint))

            // On a shared store, several dispatchers split the agents by shard (ShardLeaseKeeper), each
            // named by the endpoint it advertises; on SQLite one dispatcher serves them all.
            let shared = config.storeIsPostgres
            let advertise = config.dispatch.advertise ?? agents.lastEndpoint
            if shared, advertise.contains("0.0.0.0") || advertise.contains("*") {
                throw ConfigError("dispatch.advertise must be an address agents can reach, not '\(advertise)'; set it to this host's address and port")
            }
            let leasePeriod = max(3.0, 3 * Double(config.heartbeatMs) / 1000)
            // The dispatcher's store can lose its last commits to a power cut without losing anything: the
            // cursor then points back into the publish service's durable log, the notifications are planned
            // again, lost acknowledgements make their deliveries go out again, and agents show each once.
            let store: any DeliveryStore = try context.chooseStore(
                schema: PostgresDeliveryStore.schema,
                postgres: { try PostgresDeliveryStore(url: $0, limits: .init(leasePeriod: leasePeriod, dispatcher: advertise)) },
                sqlite: {
                    try SQLiteDeliveryStore(
                        database: try context.openStore("dispatch.db", migrations: SQLiteDeliveryStore.migrations, synchronous: "NORMAL"),
                        checkpointEvery: 5)
                })
            context.onShutdown { store.close() }
            let leases = ShardLeaseKeeper(store: store, id: advertise, period: leasePeriod)

            func perform(_ actions: [DispatchAction]) {
                for action in actions {
                    switch action {
                    case .record(let notification, let plans, let shards):
                        turn.records.append((notification, plans, shards))
                    case .send(let route, var delivery):
                        // A rich delivery carries a ticket that lets this installation, and no other, fetch the payload.
                        if let rich = delivery.rich {
                            delivery.richTicket = context.userTokens.issue(
                                user: delivery.installationId, kind: .ticket,
                                lifetime: max(60, Int(delivery.expiresAt.timeIntervalSinceNow) + 60), resource: rich.richId
                            ).token
                        }
                        if deliver(route, [AgentWire.encodeDelivery(delivery)]) { turn.sent.append(delivery) }
                    case .push(let plan, let notificationId):
                        guard let platform = Platform(name: plan.platform) else { continue }
                        turn.pushes.append(PushMessage(
                            deliveryId: plan.deliveryId, notificationId: notificationId, installationId: plan.installationId, platform: platform,
                            pushChannel: plan.pushChannel, payload: plan.payload, headers: plan.headers ?? [:], expiresAt: plan.expiresAt))
                    case .reply(let route, let frame):
                        _ = deliver(route, [AgentWire.encode(frame)])
                    case .acknowledge(let installationId, let ids):
                        turn.acks.append((installationId, ids))
                    case .fail(let installationId, let failures):
                        turn.failures.append((installationId, failures))
                        for failure in failures { logger.warning("delivery failed", ("delivery", failure.deliveryId), ("reason", failure.reason)) }
                    case .load(let installationId, let route, let limit):
                        do {
                            let (deliveries, sentBefore) = try store.unacknowledged(for: installationId, now: Date(), limit: limit)
                            perform(core.on(
                                .loaded(installationId: installationId, route: route, deliveries, complete: deliveries.count < limit,
                                        sentBefore: sentBefore), now: Date()))
                        } catch {
                            logger.error("cannot load pending deliveries", ("installation", installationId), ("error", "\(error)"))
                        }
                    case .note(.connected(let id)):
                        logger.debug("agent connected", ("installation", id))
                    case .note(.dropped(let id, let reason)):
                        logger.info("agent session ended", ("installation", id), ("reason", reason.rawValue))
                    case .note(.unplanned(let id, let reason)):
                        logger.warning("a notification reaches no one", ("notification", id), ("reason", reason))
                    }
                }
            }

            /// Sends on a route without waiting. A connection that is gone ends its session; a full queue
            /// leaves the delivery to its resend.
            func deliver(_ route: Route, _ frames: [Data]) -> Bool {
                do {
                    if try agents.send([route] + frames, wait: false) { return true }
                    sendsBlocked += 1
                } catch where error.errno == EHOSTUNREACH {
                    perform(core.on(.unreachable(route: route), now: Date()))
                } catch {
                    logger.warning("send to agent failed", ("error", "\(error)"))
                }
                return false
            }

            /// Reads the leases again at once, whatever changed (set once the pull is wired, below).
            var rereadLeases: () -> Void = {}
            /// Forgets shards a fenced write found another dispatcher holds now, and reads the leases again.
            func leasesLost(_ shards: Set<Int>) {
                leases.lost(shards)
                store.fence = leases.fence
                rereadLeases()
            }

            /// Writes what this turn decided: records, sends, acknowledgements and failures, in one
            /// transaction: on SQLite a savepoint of the open group of writes, which is committed every 50 ms
            /// rather than every turn; on PostgreSQL a commit that does not wait for the server's disk. A
            /// turn's writes stand or fall together, and losing the last of them to a crash loses nothing:
            /// the cursor then points back into the publish service's durable log, the notifications are
            /// planned again, lost acknowledgements make their deliveries go out again, and agents show
            /// each once.
            ///
            /// On a shared store the write is fenced by this dispatcher's leases: when another dispatcher
            /// has taken one of the shards written for, the whole write is rolled back, the shards held now
            /// are read again, and the turn is written again without the lost shards' work, which is the
            /// new owner's. A write that fails otherwise keeps its acknowledgements, failures and push
            /// answers for the next turn; its records are planned again from the stored cursors.
            func commit() {
                guard !turn.isEmpty else { return }
                let now = Date()
                var pending = turn
                turn = DispatchTurn()
                var fenced = false
                while true {
                    do {
                        try store.writeTurn {
                            try pending.write(to: store, now: now)
                            FaultPoint.reach(.write)
                        }
                        break
                    } catch let lost as LeaseLost where !fenced {
                        fenced = true
                        logger.warning("another dispatcher holds shards this turn wrote for; their work is dropped", ("shards", lost.shards.count))
                        leasesLost(lost.shards)
                        pending.keep(shards: leases.owned)
                    } catch {
                        logger.error("dispatch commit failed", ("error", "\(error)"))
                        turn.retry(pending)
                        rereadLeases()
                        return
                    }
                }
                FaultPoint.reach(.committed)
                if committedAt.duration(to: .now) >= .milliseconds(50) {
                    do { try commitGroup() } catch { logger.error("dispatch commit failed", ("error", "\(error)")) }
                }
                // Handed to the push services once their deliveries are in the store, where an answer finds them.
                for message in pending.pushes { push.submit(message, now: now) }
            }

            var committedAt = ContinuousClock.now
            func commitGroup() throws {
                committedAt = .now
                try store.flush()
            }
            context.loop.every(milliseconds: 50) {
                do { try commitGroup() } catch { logger.error("dispatch commit failed", ("error", "\(error)")) }
            }

            // The registry's change stream keeps the index current; a gap or a late start takes a snapshot.
            let registry = try context.client(config.registry.requests, policy: RetryPolicy(timeout: 2_000, attempts: 1))
            let replica = try CloneReplica(
                connect: config.registry.events ?? "tcp://127.0.0.1:7702", curve: security.client,
                snapshot: {
                    let snapshot = try registry.call(RegistrySnapshotRequest())
                    perform(core.on(.snapshot(snapshot), now: Date()))
                    logger.info("registry snapshot", ("sequence", snapshot.sequence), ("installations", core.index.count))
                    return snapshot.sequence
                },
                apply: { message in
                    perform(core.on(.installationChanged(try HubCodec.decode(InstallationChanged.self, from: message.body).payload), now: Date()))
                })
            context.onShutdown { replica.close() }
            context.loop.watch(replica.socket) {
                try replica.pump()
                commit()
            }
            if !shared { perform(core.on(.backlog(try store.backlog(now: Date())), now: Date())) }

            // What push services had not taken when the dispatcher last stopped goes to them again, a page at a time.
            var resume = PushResume()
            func resumePush() throws {
                guard let limit = resume.limit(pushPending: push.pending) else { return }
                let unsent = try store.pendingPush(now: Date(), limit: limit, shards: core.shards?.owned)
                for message in unsent { push.submit(message) }
                resume.read(unsent.count)
                if !unsent.isEmpty { logger.info("push deliveries resumed", ("count", unsent.count)) }
            }
            if !shared { try resumePush() }

            // A push service's answers: recorded in the turn's writes. A channel the service says is gone
            // takes its installation with it, unless the device has registered a new channel since.
            let registryWrites = try HubForwarder(connect: config.registry.requests, timeoutMs: config.requestTimeoutMs) { context.serviceToken() }
            context.onShutdown { registryWrites.close() }
            context.loop.watch(registryWrites.socket) { try registryWrites.receive() }
            afterAnswers = { commit() }
            push.note = { message, fields in logger.log(.warning, message, fields.map { ($0.0, $0.1) }) }
            push.report = { message, result in
                turn.pushResults.append((message, result))
                guard let deletion = ChannelExpiry.deletion(for: message, result, index: core.index) else { return }
                logger.info("push channel expired; removing its installation", ("installation", message.installationId), ("result", "\(result)"))
                registryWrites.forward(deletion) { result in
                    if case .failure(let error) = result, error.code != .notFound, error.code != .preconditionFailed {
                        logger.warning("cannot remove an installation whose channel expired", ("installation", message.installationId), ("error", error.message))
                    }
                }
            }

            var endpoints: [String: String] = ["agents": agents.lastEndpoint]
            var totals: [String: String] = [:]
            var totalsAt = ContinuousClock.now - .seconds(60)
            let server = try context.bindRequests(config.dispatch.requests, endpoints: { endpoints }) {
                let details = DispatchHealth.details(core, DispatchHealth.Inputs(
                    registrySequence: replica.tracker.position, cursor: pullCursor(), sendsBlocked: sendsBlocked,
                    handshakes: context.handshakes, pushPending: push.pending, pushInFlight: push.inFlight, pushStalls: push.stalls,
                    pushCounters: push.counters))
                // The store's totals scan its tables: taken at most once a second, however often health is asked.
                if totalsAt.duration(to: .now) > .seconds(1) {
                    do {
                        totals = try store.totals()
                    } catch {
                        logger.warning("cannot read the store's totals for health", ("error", "\(error)"))
                    }
                    totalsAt = .now
                }
                return details.merging(totals) { $1 }
            }
            endpoints["requests"] = server.endpoint

            // Accepted notifications are pulled from the publish service after the stored cursor, one
            // request in flight at a time and never waited on: the reply comes back through the loop.
            // Its stream only says when there is more, so a lost hint costs a tick's delay, never a send.
            let publish = try HubForwarder(connect: config.publish.requests, timeoutMs: config.requestTimeoutMs) { context.serviceToken() }
            context.onShutdown { publish.close() }
            var pulls = PullControl()
            /// Where the next pull starts: the stored cursor, or with shards the least of the owned shards'
            /// cursors (each shard then plans only what is past its own). Nil while no shard is held.
            func pullCursor() -> UInt64? {
                guard let shards = core.shards else {
                    do {
                        return try store.cursor()
                    } catch {
                        logger.error("cannot read the dispatcher's cursor", ("error", "\(error)"))
                        return nil
                    }
                }
                return shards.owned.map { shards.cursors[$0] ?? 0 }.min()
            }
            func pull() {
                guard let request = pulls.next(after: pullCursor(), registryReady: replica.tracker.position != nil) else { return }
                publish.forward(request) { result in
                    switch result {
                    case .success(let batch):
                        guard !batch.notifications.isEmpty else {
                            _ = pulls.answered(count: 0, planned: 0)
                            return
                        }
                        FaultPoint.reach(.pulled)
                        do { try replica.pump() } catch { logger.warning("registry stream", ("error", "\(error)")) }
                        let before = core.counters.planned
                        // The batch holds everything after `after`: shards taken over since the pull went
                        // out, and so behind it, are planned by a pull from their own cursor.
                        perform(core.on(.accepted(batch.notifications, after: request.after), now: Date()))
                        commit()
                        if pulls.answered(count: batch.notifications.count, planned: core.counters.planned - before) { pull() }
                    case .failure(let error):
                        pulls.failed()
                        logger.warning("pull from the publish service failed; trying again", ("error", error.message))
                    }
                }
            }
            context.loop.watch(publish.socket) {
                try publish.receive()
                commit()
            }
            let hints = try ZMQContext.shared.socket(.sub)
            try hints.setLinger(0)
            try hints.makeCurveClient(security.clientKeys, serverPublicKey: security.serverPublicKey)
            try hints.subscribe()
            try hints.connect(config.publish.events ?? "tcp://127.0.0.1:7712")
            context.onShutdown { hints.close() }
            context.loop.watch(hints) {
                var latest: UInt64 = 0
                while let frames = try hints.receive(wait: false) {
                    if let message = try? SequencedMessage(frames: frames) { latest = max(latest, message.sequence) }
                }
                if PullControl.hinted(latest: latest, cursor: pullCursor()) { pull() }
            }

            // The sync store's stream: a user's notifications changed, so signal that user's other devices.
            try context.followHints(
                config.sync.events ?? "tcp://127.0.0.1:7732",
                apply: { message in
                    let change = try HubCodec.decode(UserNotificationsChanged.self, from: message.body).payload
                    perform(core.on(.userChanged(change), now: Date()))
                },
                gap: { sequence in
                    perform(core.on(.userStreamGap, now: Date()))
                    logger.info("user change stream gap; signalled every user agent", ("at", sequence))
                })

            // The agent channel: hello (also the heartbeat) and acknowledgements, in compact frames.
            context.loop.watch(agents) {
                var handled = 0
                while handled < 2_000, let (frames, peer) = try agents.receiveFromPeer(wait: false) {
                    handled += 1
                    switch inbox.read(frames, peer: peer) {
                    case .event(let event)?: perform(core.on(event, now: Date()))
                    case .refuse(let reply)?: _ = deliver(frames[0], reply)
                    case nil: break
                    }
                }
                commit()
            }

            DispatchHandlers(
                context: context, store: store, push: push, placement: { core.placement(of: $0, advertised: advertise) },
                setPlatforms: { core.setPlatforms($0) }
            ).install(on: server)

            // Resends and silence are decided often; expiry and the pull safety net once a heartbeat.
            context.loop.every(milliseconds: 100) {
                push.tick()
                perform(core.on(.tick, now: Date()))
                commit()
            }
            // The leases, each heartbeat: shards taken bring their waiting deliveries (agents' from the
            // store when they say hello, push services' at once); shards lost move their agents. The
            // cursors are the store's, where each turn has committed.
            func refreshShards(force: Bool = false) {
                guard shared, let change = leases.beat(now: Date(), force: force) else { return }
                store.fence = leases.fence
                let before = core.shards?.owned
                perform(core.on(.shards(change.map), now: Date()))
                if before != change.map.owned { logger.info("shards", ("held", change.map.owned.count), ("gained", change.gained.count)) }
                guard !change.gained.isEmpty else { return }
                do {
                    perform(core.on(.backlog(try store.backlog(now: Date(), shards: change.gained)), now: Date()))
                    for message in try store.pendingPush(now: Date(), limit: PushResume.page, shards: change.gained) { push.submit(message) }
                } catch {
                    logger.error("cannot load the waiting deliveries of shards taken", ("error", "\(error)"))
                }
                pull()
            }
            func keepLeases() {
                refreshShards()
                commit()
            }
            rereadLeases = { refreshShards(force: true) }
            if shared {
                keepLeases()
                // After a pause (the process stopped, or a handler ran long) the leases come first, before
                // any message that waited: the fence on every write is the guarantee, this the fast path.
                context.loop.onStall(after: .milliseconds(Int(leases.margin * 1_000))) { gap in
                    logger.warning("the loop stalled; checking leases first", ("ms", Int(gap.components.seconds * 1_000) + Int(gap.components.attoseconds / 1_000_000_000_000_000)))
                    keepLeases()
                }
            }

            context.loop.every(milliseconds: config.heartbeatMs) {
                keepLeases()
                try resumePush()
                publish.expire()
                pull()
                do {
                    let expired = try store.expire(now: Date(), shards: shared ? leases.owned : nil)
                    if expired > 0 { logger.info("deliveries expired", ("count", expired)) }
                } catch let lost as LeaseLost {
                    leasesLost(lost.shards)
                }
            }
            context.loop.every(milliseconds: 600_000) { try store.purge(now: Date()) }
        }
    }
}

extension ZMQSocket {
    /// The dispatcher's agent socket: a CURVE ROUTER whose handshakes go through the ZAP handler.
    /// Sends to a connection that is gone fail at once (so its session ends), and the queue per
    /// agent holds more than a session's window.
    ///
    /// The socket arms no timer per connection: libzmq cancels a timer by scanning every timer of
    /// its I/O thread, so a heartbeat or handshake timer per agent would make each message cost
    /// O(agents). Liveness comes from the agents' hellos (a session ends after three heartbeats
    /// of silence) and from TCP keepalive, which closes connections whose host has gone.
    static func agentServer(bind endpoint: String, keys: CurveKeyPair, config: HubConfig) throws -> ZMQSocket {
        let socket = try ZMQContext.shared.socket(.router)
        try socket.setLinger(0)
        try socket.setRouterMandatory(true)
        try socket.setSendHighWaterMark(4_096)
        try socket.setReceiveHighWaterMark(100_000)
        try socket.setMaxMessageSize(config.maxMessageBytes + 4_096)
        try socket.setHandshakeInterval(0)
        try socket.setTCPKeepalive(idle: 60, interval: 10, count: 3)
        try socket.setBacklog(4_096)
        try socket.makeCurveServer(keys, domain: ZAPHandler.agentDomain)
        try socket.bind(endpoint)
        return socket
    }
}
