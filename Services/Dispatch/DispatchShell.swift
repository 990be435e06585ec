import Auth
import Bus
import DispatchCore
import Foundation
import HubProtocol
import Push
import ServiceKit
import Storage

/// The shell around `Dispatcher`: it turns socket traffic, timers and store answers into the
/// core's events, and carries out the actions that come back. It owns a turn's writes (one
/// transaction per turn, committed in groups; or on PostgreSQL turns gathered in memory and
/// written as one: `GroupCommitPolicy`), the pull from the publish service, the
/// shards' leases and the hand-over to push services. `DispatchMain` makes the parts and wires
/// each socket and timer to one of its methods.
final class DispatchShell {
    private(set) var core: Dispatcher
    let store: any DeliveryStore
    let leases: ShardLeaseKeeper
    let push: PushCenter
    /// The agents' ROUTER socket.
    let agents: ZMQSocket
    /// Pulls accepted notifications from the publish service.
    let publish: HubForwarder
    /// Removes installations whose push channel a service reports gone.
    let registryWrites: HubForwarder
    /// The registry's change stream, set once made: its snapshot calls back into this shell.
    var replica: CloneReplica?
    /// On a shared store, several dispatchers split the agents by shard; on SQLite one serves all.
    let shared: Bool
    private let context: ServiceContext
    private let inbox: AgentInbox
    private var logger: Logger { context.logger }

    private var turn = DispatchTurn()
    /// Writes deliveries' frames, a broadcast's sharing all but their ids.
    private var deliveries = AgentWire.DeliveryEncoder()
    private var groups = GroupCommitPolicy()
    /// A write of the turn is under way: what it calls on failure (the leases read again) must not write it again.
    private var writing = false
    /// A write failed and its records were dropped, on a shared store: nothing is planned until the
    /// core's cursors have gone back to the store's, at the next reading of the leases that succeeds.
    private var rewinding = false
    private var pulls = PullControl()
    /// Notifications planned as they came whole on the publish service's stream, and as pulled (health).
    private var planned = (streamed: 0, pulled: 0)
    private var resume = PushResume()
    /// Watches the store's sessions: after a lost connection, or a failover, what is in memory is
    /// read again from the store (`storeSessions`).
    let history: StoreHistoryWatch
    /// Moved on at each new session of the store: a pull sent before it is answered from before it.
    private var pullGeneration = 0
    /// After a failover, the new history's first number: what the publish service's stream carried
    /// below it is of the old history, and left to pulls.
    private var streamFloor: UInt64 = 0
    /// Every shard's waiting deliveries are read again at the next reading of the leases that succeeds.
    private var reloading = false
    /// The last notification planned in each epoch of the store's history, for the line that says
    /// what a new session of the store makes this dispatcher plan again.
    private var plannedTo: [UInt64: UInt64] = [:]
    /// Sends an agent's full queue refused; the delivery is left to its resend.
    private(set) var sendsBlocked = 0
    private var totals = StoreTotals()

    init(
        context: ServiceContext, settings: DispatcherSettings, inbox: AgentInbox, store: any DeliveryStore, leases: ShardLeaseKeeper,
        push: PushCenter, agents: ZMQSocket, publish: HubForwarder, registryWrites: HubForwarder, shared: Bool
    ) {
        self.context = context
        self.core = Dispatcher(settings: settings)
        self.inbox = inbox
        self.store = store
        self.leases = leases
        self.push = push
        self.agents = agents
        self.publish = publish
        self.registryWrites = registryWrites
        self.shared = shared
        history = StoreHistoryWatch(store, logger: context.logger)
    }

    /// Hands an event to the core and carries out what it decides.
    func handle(_ event: DispatchEvent) {
        perform(core.on(event, now: Date()))
    }

    func setPlatforms(_ platforms: Set<String>) { core.setPlatforms(platforms) }

    private func perform(_ actions: [DispatchAction]) {
        for action in actions {
            switch action {
            case .record(let notification, let plans, let shards):
                turn.records.append((notification, plans, shards, Date()))
            case .send(let route, let delivery):
                // A rich delivery carries a ticket that lets this installation, and no other, fetch the payload.
                guard let rich = delivery.rich else {
                    if deliver(route, deliveries.encode(delivery)) { turn.sent.append(delivery) }
                    continue
                }
                var ticketed = delivery
                ticketed.richTicket = context.userTokens.issue(
                    user: delivery.installationId, kind: .ticket,
                    lifetime: max(60, Int(delivery.expiresAt.timeIntervalSinceNow) + 60), resource: rich.richId
                ).token
                if deliver(route, deliveries.encode(ticketed)) { turn.sent.append(ticketed) }
            case .push(let plan, let notificationId):
                guard let platform = Platform(name: plan.platform) else { continue }
                turn.pushes.append(PushMessage(
                    deliveryId: plan.deliveryId, notificationId: notificationId, installationId: plan.installationId, platform: platform,
                    pushChannel: plan.pushChannel, payload: plan.payload, headers: plan.headers ?? [:], expiresAt: plan.expiresAt))
            case .reply(let route, let frame):
                _ = deliver(route, AgentWire.encode(frame))
            case .acknowledge(let installationId, let ids):
                turn.acks.append((installationId, ids))
            case .fail(let installationId, let failures):
                turn.failures.append((installationId, failures))
                for failure in failures { logger.warning("delivery failed", ("delivery", failure.deliveryId), ("reason", failure.reason)) }
            case .load(let installationId, let route, let limit):
                writeGathered()
                do {
                    let (deliveries, sentBefore) = try store.unacknowledged(for: installationId, now: Date(), limit: limit)
                    handle(.loaded(installationId: installationId, route: route, deliveries, complete: deliveries.count < limit, sentBefore: sentBefore))
                } catch {
                    logger.error("cannot load pending deliveries", ("installation", installationId), ("error", "\(error)"))
                    handle(.loadFailed(installationId: installationId, route: route))
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

    /// Sends one frame on a route without waiting. A connection that is gone ends its session; a
    /// full queue leaves the delivery to its resend.
    private func deliver(_ route: Route, _ frame: Data) -> Bool {
        sending(to: route) { () throws(ZMQError) in try agents.send(route, frame, wait: false) }
    }

    /// Sends frames on a route without waiting, as `deliver(_:_:)` does one.
    private func deliver(_ route: Route, frames: [Data]) -> Bool {
        sending(to: route) { () throws(ZMQError) in try agents.send([route] + frames, wait: false) }
    }

    private func sending(to route: Route, _ send: () throws(ZMQError) -> Bool) -> Bool {
        do {
            if try send() { return true }
            sendsBlocked += 1
        } catch where error.errno == EHOSTUNREACH {
            handle(.unreachable(route: route))
        } catch {
            logger.warning("send to agent failed", ("error", "\(error)"))
        }
        return false
    }

    // MARK: The turn's writes

    /// Writes what this turn decided: records, sends, acknowledgements and failures, in one
    /// transaction: on SQLite a savepoint of the open group of writes, which commits when
    /// `GroupCommitPolicy` says (every 50 ms to 2 s) rather than every turn; on PostgreSQL a commit
    /// that does not wait for the server's disk. A turn's writes stand or fall together, and losing
    /// the last of them to a crash loses nothing:
    /// the cursor then points back into the publish service's durable log, the notifications are
    /// planned again, lost acknowledgements make their deliveries go out again, and agents show
    /// each once.
    ///
    /// On a shared store the write is fenced by this dispatcher's leases: when another dispatcher
    /// has taken one of the shards written for, the whole write is rolled back, the shards held now
    /// are read again, and the turn is written again without the lost shards' work, which is the
    /// new owner's. A write that fails otherwise keeps its acknowledgements, failures and push
    /// answers for the next turn; its records are planned again from the stored cursors.
    ///
    /// Where the store's turns wait for their group (PostgreSQL), a turn joins the one gathered in
    /// memory since the last write, and the whole is written as one turn when the group is due, or
    /// at once with `now` (`writeGathered`). No transaction stays open meanwhile, and a delivery
    /// acknowledged within the group is never written. A crash loses what was gathered as it
    /// would lose an open group: the cursors have not moved past it.
    func commit(now force: Bool = false) {
        let gathers = store.turnsWaitForGroup
        guard !turn.isEmpty else {
            if gathers { groups.committed(at: .now) }
            return
        }
        if gathers, !force, !groups.writes(gathered: turn, at: .now, awaited: core.inFlightCount) { return }
        writing = true
        defer { writing = false }
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
            } catch is StoreSessionChanged {
                // Nothing was written: the records are planned again once the cursors are read again
                // (`storeSessions`, at the next tick); what is written the same however often is kept.
                turn.retry(pending)
                return
            } catch {
                logger.error("dispatch commit failed", ("error", "\(error)"))
                turn.retry(pending)
                if shared { rewinding = true }
                refreshShards(force: true)
                return
            }
        }
        FaultPoint.reach(.committed)
        if gathers {
            groups.committed(at: .now)
        } else {
            commitGroupIfDue()
        }
        // Handed to the push services once their deliveries are in the store, where an answer finds them.
        for message in pending.pushes { push.submit(message, now: now) }
    }

    /// Commits the open group of writes, or writes the turns gathered, when `GroupCommitPolicy`
    /// says it is time: on a timer, and after each turn.
    func commitGroupIfDue() {
        if store.turnsWaitForGroup {
            commit()
        } else if groups.due(at: .now, held: store.held, awaited: core.inFlightCount) {
            commitGroup()
        }
    }

    /// Writes the turns gathered in memory, where the store's turns wait for their group, so that
    /// what the store is asked next sees them: before deliveries are loaded, push deliveries are
    /// resumed, or an outcome or a test send's results are read. Health's totals do not wait for
    /// it: they may trail by a group.
    func writeGathered() {
        if store.turnsWaitForGroup, !writing { commit(now: true) }
    }

    /// Commits the open group of writes (SQLite; on PostgreSQL each write has committed already).
    func commitGroup() {
        groups.committed(at: .now)
        do { try store.flush() } catch { logger.error("dispatch commit failed", ("error", "\(error)")) }
    }

    // MARK: Agents, the registry, the sync store

    /// Reads what waits on the agent channel (hello, which is also the heartbeat, and
    /// acknowledgements), at most 2,000 messages a turn.
    func readAgents() throws {
        var handled = 0
        while handled < 2_000, let (frames, peer) = try agents.receiveFromPeer(wait: false) {
            handled += 1
            switch inbox.read(frames, peer: peer) {
            case .event(let event)?: handle(event)
            case .refuse(let reply)?: _ = deliver(frames[0], frames: reply)
            case nil: break
            }
        }
        if pulls.resumes(inFlight: core.inFlightCount) { pull() }
        commit()
    }

    /// The registry's stream: a snapshot when there is a gap or at start.
    func registrySnapshot(_ snapshot: RegistrySnapshot) {
        handle(.snapshot(snapshot))
        logger.info("registry snapshot", ("sequence", snapshot.sequence), ("installations", core.index.count))
    }

    /// The sync store's stream skipped changes: every user agent is signalled.
    func userStreamGap(at sequence: UInt64) {
        handle(.userStreamGap)
        logger.info("user change stream gap; signalled every user agent", ("at", sequence))
    }

    // MARK: The pull

    /// Where the next pull starts: the stored cursor, or with shards the least of the owned shards'
    /// cursors (each shard then plans only what is past its own). Nil while no shard is held.
    func pullCursor() -> UInt64? {
        guard !rewinding else { return nil }
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

    /// Accepted notifications are pulled from the publish service after the stored cursor, one
    /// request in flight at a time and never waited on: the reply comes back through the loop.
    func pull() {
        guard let request = pulls.next(after: pullCursor(), registryReady: replica?.tracker.position != nil, inFlight: core.inFlightCount)
        else { return }
        let generation = pullGeneration
        publish.forward(request) { [self] result in
            // Sent before the store's last new session: its notifications may be of another history.
            guard generation == pullGeneration else { return }
            switch result {
            case .success(let batch):
                guard !batch.notifications.isEmpty else {
                    _ = pulls.answered(count: 0, planned: 0)
                    streamedMeanwhile()
                    return
                }
                let deliveries = plan(batch.notifications, after: request.after)
                planned.pulled += batch.notifications.count
                let more = pulls.answered(count: batch.notifications.count, planned: deliveries)
                if !streamedMeanwhile() && more { pull() }
            case .failure(let error):
                pulls.failed()
                logger.warning("pull from the publish service failed; trying again", ("error", error.message))
                streamedMeanwhile()
            }
        }
    }

    /// What came on the stream while a pull was on its way, planned once its reply is: those next
    /// after the cursor are planned from here, and only what they do not cover is pulled. Without
    /// it, a dispatcher that pulled once while sends kept coming would pull page after page.
    /// Returns false when nothing came meanwhile.
    @discardableResult
    private func streamedMeanwhile() -> Bool {
        let messages = pulls.takeKept()
        guard !messages.isEmpty else { return false }
        streamed(messages)
        return true
    }

    /// The publish service's stream says there is more past `latest`: only a hint, so a lost one
    /// costs a tick's delay, never a send.
    func hinted(latest: UInt64) {
        if PullControl.hinted(latest: latest, cursor: pullCursor()) { pull() }
    }

    /// Messages from the publish service's stream. Those that carry their notification whole, next
    /// after the cursor, are planned at once, as a pull's reply would be, which saves the pull's round
    /// trip; anything past them (a gap, a large notification, or all of them while a pull is on its
    /// way) is left to a pull. They are planned a page at a time, each page its own turn, up to
    /// `PullControl.streamedPages` pages, while the deliveries in flight stay below the limit; the
    /// stream is read as many at a time, so the rest waits on its socket, not pulled.
    func streamed(_ messages: [SequencedMessage]) {
        let messages = streamFloor == 0 ? messages : messages.filter { $0.isHeartbeat || $0.sequence > streamFloor }
        guard let latest = messages.map(\.sequence).max() else { return }
        // While a pull is on its way, kept for after its reply.
        guard !pulls.keep(messages) else { return }
        for _ in 0..<PullControl.streamedPages {
            guard pulls.takesStreamed(registryReady: replica?.tracker.position != nil, inFlight: core.inFlightCount),
                let cursor = pullCursor()
            else { break }
            let batch = PullControl.streamed(messages, after: cursor, limit: pulls.limit)
            guard !batch.isEmpty else { break }
            let deliveries = plan(batch, after: cursor)
            planned.streamed += batch.count
            pulls.adapt(count: batch.count, planned: deliveries)
        }
        hinted(latest: latest)
    }

    /// Plans notifications that hold everything after `after`, pulled or from the stream, with the
    /// registry's stream read first, and writes the turn; returns how many deliveries they planned.
    /// Shards taken over since `after` was read, and so behind it, are planned by a pull from their
    /// own cursor.
    private func plan(_ notifications: [AcceptedNotification], after: UInt64) -> Int {
        // Pulled again once the cursors have gone back.
        guard !rewinding else { return 0 }
        FaultPoint.reach(.pulled)
        do { try replica?.pump() } catch { logger.warning("registry stream", ("error", "\(error)")) }
        let before = core.counters.planned
        if let last = notifications.last?.sequence {
            plannedTo[HistoryNumbering.epoch(of: last), default: 0] = max(plannedTo[HistoryNumbering.epoch(of: last)] ?? 0, last)
        }
        handle(.accepted(notifications, after: after))
        commit()
        return core.counters.planned - before
    }

    // MARK: Push services

    /// What push services had not taken when the dispatcher last stopped goes to them again, a page at a time.
    func resumePush() throws {
        guard let limit = resume.limit(pushPending: push.pending) else { return }
        writeGathered()
        let unsent = try store.pendingPush(now: Date(), limit: limit, shards: core.shards?.owned)
        for message in unsent { push.submit(message) }
        resume.read(unsent.count)
        if !unsent.isEmpty { logger.info("push deliveries resumed", ("count", unsent.count)) }
    }

    /// A push service's answer: recorded in the turn's writes. A channel the service says is gone
    /// takes its installation with it, unless the device has registered a new channel since.
    func pushAnswered(_ message: PushMessage, _ result: PushResult) {
        turn.pushResults.append((message, result))
        if let move = ChannelMove.upsert(for: message, result, index: core.index) {
            logger.info("push service named the device's channel anew; moving the installation there", ("installation", message.installationId))
            registryWrites.forward(move) { [logger] result in
                if case .failure(let error) = result, error.code != .notFound, error.code != .preconditionFailed {
                    logger.warning("cannot move an installation to its new channel", ("installation", message.installationId), ("error", error.message))
                }
            }
            return
        }
        guard let deletion = ChannelExpiry.deletion(for: message, result, index: core.index) else { return }
        logger.info("push channel expired; removing its installation", ("installation", message.installationId), ("result", "\(result)"))
        registryWrites.forward(deletion) { [logger] result in
            if case .failure(let error) = result, error.code != .notFound, error.code != .preconditionFailed {
                logger.warning("cannot remove an installation whose channel expired", ("installation", message.installationId), ("error", error.message))
            }
        }
    }

    // MARK: Timers and leases

    /// Resends and silence are decided often; a new session of the store is acted on first.
    func tick() {
        storeSessions()
        push.tick()
        handle(.tick)
        commit()
    }

    /// Once a heartbeat: the leases, push deliveries to resume, the pull's safety net and expiry.
    func heartbeat() throws {
        storeSessions()
        keepLeases()
        try resumePush()
        publish.expire()
        pull()
        do {
            let expired = try store.expire(now: Date(), shards: shared ? leases.owned : nil)
            if expired > 0 { logger.info("deliveries expired", ("count", expired)) }
        } catch let lost as LeaseLost {
            leasesLost(lost.shards)
        } catch is StoreSessionChanged {
            // The leases were read in a new session of the store: acted on first, at the next tick.
        }
    }

    /// Now and then, what is done is forgotten (`DeliveryStore.purge`), once a new session of the store is acted on.
    func purge() throws {
        storeSessions()
        do { try store.purge(now: Date()) } catch is StoreSessionChanged {}
    }

    /// The leases, each heartbeat: shards taken bring their waiting deliveries (agents' from the
    /// store when they say hello, push services' at once); shards lost move their agents. A shard
    /// taken starts from the store's cursor; one held on keeps the core's.
    func keepLeases() {
        refreshShards()
        commit()
    }

    /// After a failed write (`rewinding`) the core's cursors go back to the store's, and what it
    /// had planned past them is planned again. Otherwise a shard held on at the same epoch keeps
    /// the core's cursor where it is ahead of the store's (turns gathered in memory, not written
    /// yet); work gathered for a shard taken at a new epoch is dropped, as a fenced write drops it,
    /// since the shard starts again from the store's cursor.
    private func refreshShards(force: Bool = false) {
        guard shared, var change = leases.beat(now: Date(), force: force || rewinding || reloading) else { return }
        if reloading {
            reloading = false
            change.gained = change.map.owned
        }
        store.fence = leases.fence
        let before = core.shards?.owned
        if rewinding {
            rewinding = false
        } else if let planned = core.shards?.cursors {
            change.map.cursors = ShardMap.keeping(planned, over: change.map.cursors, except: change.gained)
            if !change.gained.isEmpty, !turn.isEmpty { turn.keep(shards: change.map.owned.subtracting(change.gained)) }
        }
        handle(.shards(change.map))
        if before != change.map.owned { logger.info("shards", ("held", change.map.owned.count), ("gained", change.gained.count)) }
        guard !change.gained.isEmpty else { return }
        do {
            handle(.backlog(try store.backlog(now: Date(), shards: change.gained)))
            for message in try store.pendingPush(now: Date(), limit: PushResume.page, shards: change.gained) { push.submit(message) }
        } catch {
            logger.error("cannot load the waiting deliveries of shards taken", ("error", "\(error)"))
        }
        pull()
    }

    /// The store was reached in a new session (after a lost connection, or on a server that failed
    /// over): positions in memory are not trusted across it. The records of turns not written yet
    /// are dropped, a pull on its way is forgotten, the cursors go back to the store's (which, kept
    /// in the same database as the publish service's log, are never past what the log holds), every
    /// session loads its deliveries again from the store, and what the store has for push services
    /// is handed to them again. What was planned past the store's cursors is planned again, and the
    /// agents show each notification once. After a failover, what the publish service's stream
    /// carried of the old history is left to pulls from the new one, and the error line names what
    /// the old history had that the new one lost.
    func storeSessions() {
        guard shared else { return }
        /// `planned`: how far this dispatcher had planned, for the log line.
        func again(planned: UInt64) -> [(String, CustomStringConvertible)] {
            let dropped = turn
            turn = DispatchTurn()
            turn.retry(dropped)
            // What is written the same however often goes in now, before the store is read again:
            // a push answer left unwritten would hand its delivery to the push service again.
            commit(now: true)
            pulls.failed()
            _ = pulls.takeKept()
            pullGeneration += 1
            rewinding = true
            reloading = true
            handle(.storeRenewed)
            refreshShards(force: true)
            let from = pullCursor().map(String.init) ?? "the store's cursors once the leases are read"
            return [("plannedTo", planned), ("plannedAgainAfter", from)]
        }
        history.check(renewed: { _ in again(planned: plannedTo.values.max() ?? 0) }) { _, to in
            streamFloor = max(streamFloor, to.base)
            // How far the older histories were planned: the new one's numbers are above it (and
            // some of them may have been planned in memory already).
            let before = plannedTo.filter { $0.key < to.epoch }.values.max() ?? 0
            var fields = again(planned: before)
            if let lost = try? history.lost(upTo: before, of: "publish.stream", latest: .max) {
                fields.append(("lost", "publish numbers \(StoreHistoryWatch.describe(lost)), planned before the failover and absent now"))
            }
            fields.append(("next", "new sends are numbered from \(to.base + 1)"))
            return fields
        }
    }

    /// Forgets shards a fenced write found another dispatcher holds now, and reads the leases again.
    private func leasesLost(_ shards: Set<Int>) {
        leases.lost(shards)
        store.fence = leases.fence
        refreshShards(force: true)
    }

    // MARK: Health

    /// The health details: the core's, the pull's, the push services', and the store's totals.
    func health() -> [String: String] {
        let details = DispatchHealth.details(core, DispatchHealth.Inputs(
            registrySequence: replica?.tracker.position, cursor: pullCursor(), sendsBlocked: sendsBlocked,
            handshakes: context.bus.handshakes, pushPending: push.pending, pushInFlight: push.inFlight, pushStalls: push.stalls,
            pushCounters: push.counters, planned: planned))
        return details.merging(totals.read(store, logger: logger)) { $1 }.merging(history.details) { $1 }
            .merging(["storeRenewals": String(core.counters.storeRenewals)]) { $1 }
    }
}

extension DispatchShell {
    /// The agents' socket. Agents connect from other hosts over CURVE, through the hub's bus key;
    /// its ZAP domain lets any agent key through the handshake, and a hello is then accepted only
    /// for an installation bound to the key the connection was authenticated with.
    static func agentSocket(_ context: ServiceContext) throws -> ZMQSocket {
        guard let busKeys = context.bus.security?.serverKeys else { throw ConfigError("the bus is not secured") }
        let endpoint = context.config.dispatch.agents ?? "tcp://127.0.0.1:7722"
        guard !endpoint.contains(",") else {
            throw ConfigError("dispatch.agents '\(endpoint)' lists several endpoints; a dispatcher binds one (agents may be given several)")
        }
        let agents = try ZMQSocket.agentServer(bind: endpoint, keys: busKeys, config: context.config)
        context.onShutdown { agents.close() }
        context.logger.info("listening", ("role", "agents"), ("endpoint", agents.lastEndpoint))
        return agents
    }

    /// The deliveries' store: PostgreSQL, shared with other dispatchers by shard, or SQLite. It can
    /// lose its last commits to a power cut without losing anything: the cursor then points back
    /// into the publish service's durable log, the notifications are planned again, lost
    /// acknowledgements make their deliveries go out again, and agents show each once.
    static func openStore(_ context: ServiceContext, advertise: String, leasePeriod: Double) throws -> any DeliveryStore {
        if context.config.storeIsPostgres, advertise.contains("0.0.0.0") || advertise.contains("*") {
            throw ConfigError("dispatch.advertise must be an address agents can reach, not '\(advertise)'; set it to this host's address and port")
        }
        let store: any DeliveryStore = try context.stores.choose(
            schema: PostgresDeliveryStore.schema,
            postgres: { try PostgresDeliveryStore(url: $0, limits: .init(leasePeriod: leasePeriod, dispatcher: advertise)) },
            sqlite: {
                try SQLiteDeliveryStore(
                    database: try context.stores.open("dispatch.db", migrations: SQLiteDeliveryStore.migrations, synchronous: "NORMAL"))
            })
        context.onShutdown { store.close() }
        return store
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
        try socket.setBacklog(65_535)
        try socket.makeCurveServer(keys, domain: ZAPHandler.agentDomain)
        try socket.bind(endpoint)
        return socket
    }
}
