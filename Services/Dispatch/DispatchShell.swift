import Auth
import Bus
import DispatchCore
import Foundation
import HubProtocol
import Push
import ServiceKit
import Storage

/// The shell around the dispatcher's plain types: it turns socket traffic, timers and store
/// answers into their events, and carries out what they decide. `Dispatcher` decides what agents
/// and push services get; `WritePath` when a turn is written and what a write's end or a reading
/// of the leases changes (`DispatchShell+Writes`); `PullControl` when to pull from the publish
/// service (`DispatchShell+Pull`). Its parts come made, in `DispatchMain`, which wires each socket
/// and timer to one of its methods; none of them calls back into it.
final class DispatchShell {
    private(set) var core: Dispatcher
    var writes: WritePath
    let store: any DeliveryStore
    let leases: ShardLeaseKeeper
    let push: PushCenters
    /// The agents' channel.
    let agents: any AgentChannel
    /// Pulls accepted notifications from the publish service.
    let publish: any RequestForwarding
    /// Removes installations whose push channel a service reports gone.
    let registryWrites: any RequestForwarding
    /// The registry's change stream, which keeps the index current.
    let registry: RegistryFeed?
    /// On a shared store, several dispatchers split the agents by shard; on SQLite one serves all.
    var shared: Bool { writes.shared }
    let context: ServiceContext
    private let inbox: AgentInbox
    var logger: Logger { context.logger }

    /// Writes deliveries' frames, a broadcast's sharing all but their ids.
    private var deliveries = AgentWire.DeliveryEncoder()
    var pulls = PullControl()
    /// Notifications planned as they came whole on the publish service's stream, and as pulled (health).
    var planned = (streamed: 0, pulled: 0)
    private var resume = PushResume()
    /// Watches the store's sessions: after a lost connection, or a failover, what is in memory is
    /// read again from the store (`storeSessions`).
    let history: StoreHistoryWatch
    /// Moved on at each new session of the store: a pull sent before it is answered from before it.
    var pullGeneration = 0
    /// After a failover, the new history's first number: what the publish service's stream carried
    /// below it is of the old history, and left to pulls.
    var streamFloor: UInt64 = 0
    /// The last notification planned in each epoch of the store's history, for the line that says
    /// what a new session of the store makes this dispatcher plan again.
    var plannedTo: [UInt64: UInt64] = [:]
    /// Sends an agent's full queue refused; the delivery is left to its resend.
    private(set) var sendsBlocked = 0
    private var totals = StoreTotals()

    init(
        context: ServiceContext, settings: DispatcherSettings, inbox: AgentInbox, store: any DeliveryStore, leases: ShardLeaseKeeper,
        push: PushCenters, agents: any AgentChannel, publish: any RequestForwarding, registryWrites: any RequestForwarding,
        registry: RegistryFeed?, shared: Bool
    ) {
        self.context = context
        self.core = Dispatcher(settings: settings)
        writes = WritePath(commits: store.commits, shared: shared, now: .now)
        self.inbox = inbox
        self.store = store
        self.leases = leases
        self.push = push
        self.agents = agents
        self.publish = publish
        self.registryWrites = registryWrites
        self.registry = registry
        history = StoreHistoryWatch(store, logger: context.logger)
    }

    /// Hands an event to the core and carries out what it decides.
    func handle(_ event: DispatchEvent) {
        perform(core.on(event, now: Date()))
    }

    func setPlatforms(_ platforms: Set<String>, hub: String?) { core.setPlatforms(platforms, hub: hub) }

    private func perform(_ actions: [DispatchAction]) {
        for action in actions {
            switch action {
            case .record(let notification, let plans, let shards, let parked):
                writes.turn.records.append((notification, plans, shards, Date(), parked))
            case .position(let installationId, let position):
                writes.turn.positions.append((installationId, position))
            case .keepOwed(let installationId, let owed):
                writes.turn.owed.append((installationId, owed))
            case .send(let route, let delivery):
                // A rich delivery carries a ticket that lets this installation, and no other, fetch the payload.
                guard let rich = delivery.rich else {
                    if deliver(route, deliveries.encode(delivery)) { writes.turn.sent.append(delivery) }
                    continue
                }
                var ticketed = delivery
                ticketed.richTicket = context.userTokens.issue(
                    user: delivery.installationId, kind: .ticket,
                    lifetime: max(60, Int(delivery.expiresAt.timeIntervalSinceNow) + 60), resource: rich.richId
                ).token
                if deliver(route, deliveries.encode(ticketed)) { writes.turn.sent.append(ticketed) }
            case .push(let plan, let notificationId):
                guard let platform = Platform(name: plan.platform) else { continue }
                writes.turn.pushes.append(PushMessage(
                    deliveryId: plan.deliveryId, notificationId: notificationId, installationId: plan.installationId, platform: platform,
                    pushChannel: plan.pushChannel, payload: plan.payload, headers: plan.headers ?? [:], expiresAt: plan.expiresAt))
            case .reply(let route, let frame):
                _ = deliver(route, AgentWire.encode(frame))
            case .acknowledge(let installationId, let ids):
                writes.turn.acks.append((installationId, ids))
            case .fail(let installationId, let failures):
                writes.turn.failures.append((installationId, failures))
                for failure in failures { logger.warning("delivery failed", ("delivery", failure.deliveryId), ("reason", failure.reason)) }
            case .load(let installationId, let route, let limit, let owed):
                writeGathered()
                do {
                    // What it missed while away, and that it is here, in one write before it loads
                    // (a turn of the open group on SQLite, where what it makes is held in memory).
                    var made: [AgentDelivery] = []
                    try store.writeTurn { made = try store.catchUp(owed, installationId: installationId, now: Date()) }
                    if !core.hasBacklog(installationId), made.count < limit {
                        // The store holds nothing else for it: what was made is all there is.
                        handle(.loaded(installationId: installationId, route: route, made, complete: true))
                        continue
                    }
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

    /// Reads the registry's stream into the index: a snapshot when there is a gap or at start.
    func readRegistry() throws {
        try registry?.pump { update in
            switch update {
            case .snapshot(let snapshot):
                handle(.snapshot(snapshot))
                logger.info("registry snapshot", ("sequence", snapshot.sequence), ("installations", core.index.count))
            case .changed(let change):
                handle(.installationChanged(change))
            }
        }
    }

    /// The sync store's stream skipped changes: every user agent is signalled.
    func userStreamGap(at sequence: UInt64) {
        handle(.userStreamGap)
        logger.info("user change stream gap; signalled every user agent", ("at", sequence))
    }

    // MARK: Push services

    /// What push services had not taken when the dispatcher last stopped goes to them again, a page at a time.
    func resumePush() throws {
        guard let limit = resume.limit(pushPending: push.pending) else { return }
        writeGathered()
        let unsent = try store.pendingPush(now: Date(), limit: limit, shards: core.shards?.owned)
        submit(unsent)
        resume.read(unsent.count)
        if !unsent.isEmpty { logger.info("push deliveries resumed", ("count", unsent.count)) }
    }

    /// Hands deliveries to the push services, and takes in what they reported at once.
    func submit(_ messages: [PushMessage], now: Date = Date()) {
        for message in messages { push.submit(message, now: now) }
        pushAnswered()
    }

    /// The push services' answers since the last call: recorded in the turn's writes. A channel
    /// the service says is gone takes its installation with it, unless the device has registered a
    /// new channel since.
    func pushAnswered() {
        for (message, result) in push.takeReports() { pushAnswered(message, result) }
    }

    private func pushAnswered(_ message: PushMessage, _ result: PushResult) {
        writes.turn.pushResults.append((message, result))
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

    // MARK: Timers

    /// Resends and silence are decided often; a new session of the store is acted on first.
    func tick() {
        storeSessions()
        push.tick()
        pushAnswered()
        handle(.tick)
        commit()
    }

    /// Once a heartbeat: the leases, push deliveries to resume, the pull's safety net and expiry.
    func heartbeat() throws {
        storeSessions()
        keepLeases()
        try resumePush()
        publish.expire(now: Date())
        pull()
        do {
            let expired = try store.expire(now: Date(), shards: shared ? leases.owned : nil)
            if expired > 0 { logger.info("deliveries expired", ("count", expired)) }
        } catch let lost as LeaseLost {
            carryOut(writes.on(.leasesLost(lost.shards)))
        } catch is StoreSessionChanged {
            // The leases were read in a new session of the store: acted on first, at the next tick.
        }
    }

    /// Now and then, what is done is forgotten (`DeliveryStore.purge`), once a new session of the store is acted on.
    func purge() throws {
        storeSessions()
        do { try store.purge(now: Date()) } catch is StoreSessionChanged {}
    }

    // MARK: Health

    /// The health details: the core's, the pull's, the push services', and the store's totals.
    func health() -> [String: String] {
        let details = DispatchHealth.details(core, DispatchHealth.Inputs(
            registrySequence: registry?.position, cursor: pullCursor(), sendsBlocked: sendsBlocked,
            handshakes: context.bus.handshakes, pushPending: push.pending, pushInFlight: push.inFlight, pushStalls: push.stalls,
            pushCounters: push.counters, planned: planned))
        return details.merging(totals.read(store, logger: logger)) { $1 }.merging(history.details) { $1 }
            .merging(["storeRenewals": String(core.counters.storeRenewals)]) { $1 }
    }
}
