import Foundation
import HubProtocol

/// The dispatcher's decisions, with no IO: agent sessions, planning, delivery with a window per
/// session, acknowledgements, resends from a queue ordered by due time, silence and user signals.
///
/// The service feeds it events (`on(_:now:)`) and carries out the actions it returns, in order:
/// socket sends, store writes and store reads. Everything it holds in memory is also in the store
/// (a delivery is written, on the service's connection, in the turn it is planned), so dropping a session's memory and
/// loading it again from the store is always safe; that is how a replaced or returning session
/// resumes.
public struct Dispatcher {
    public private(set) var index = InstallationIndex()
    /// Whether the registry's snapshot has been read: before it, the index cannot say whether an
    /// installation is registered.
    public private(set) var registryRead = false
    public private(set) var settings: DispatcherSettings
    public private(set) var counters = DispatcherCounters()
    private var resolver = TargetResolver()
    private var sessions: [Route: Session] = [:]
    private var routes: [String: Route] = [:]
    private var inFlight: [DeliveryKey: InFlight] = [:]
    private var resends = DueQueue<DeliveryKey>()
    /// Installations whose unacknowledged deliveries are in the store and not in memory.
    private var backlog: Set<String> = []
    /// Sessions with deliveries waiting for room under `maxInFlight`, oldest first.
    private var starved = FIFO<Route>()
    private var isStarved: Set<Route> = []
    private var lastSilenceCheck = Date.distantPast
    /// The shards served here, where several dispatchers share the agents; nil: all of them.
    public private(set) var shards: ShardMap?
    /// Sessions to load again from the store after its new session, oldest first, a few each tick
    /// so that the loop is not held up by thousands of loads at once.
    private var reloads = FIFO<Route>()
    private var reloading: Set<Route> = []
    /// Broadcasts stored once, not yet expired, oldest first: what agents away when they were
    /// planned catch up on when they come back (`owed`).
    public private(set) var parked: [ParkedBroadcast] = []
    /// The registry's sequence the index stands at: a broadcast parked now is owed to an
    /// installation whose version is no later.
    public private(set) var registryAt: UInt64 = 0
    /// The last notification planned, with one dispatcher (with several, each shard's cursor).
    public private(set) var planned: UInt64 = 0

    public init(settings: DispatcherSettings = DispatcherSettings()) {
        self.settings = settings
    }

    // MARK: Events

    public mutating func on(_ event: DispatchEvent, now: Date) -> [DispatchAction] {
        var actions: [DispatchAction] = []
        switch event {
        case .backlog(let installations):
            backlog.formUnion(installations)
        case .parked(let broadcasts, let cursor):
            planned = max(planned, cursor ?? 0)
            for broadcast in broadcasts { park(broadcast.notification, broadcast.shards) }
        case .snapshot(let snapshot):
            index.replace(with: snapshot)
            registryAt = max(registryAt, snapshot.sequence)
            registryRead = true
            for route in sessions.keys.sorted(by: { $0.lexicographicallyPrecedes($1) }) { checkBinding(route, &actions) }
        case .installationChanged(let change):
            changed(change, now: now, &actions)
        case .hello(let route, let peerKey, let installationId, let registered):
            hello(route: route, peerKey: peerKey, installationId: installationId, registered: registered, now: now, &actions)
        case .ack(let route, let ack):
            acknowledge(route: route, ack, now: now, &actions)
        case .bye(let route, let installationId):
            // Only the session on this connection, for the installation it speaks for, ends.
            guard let session = session(on: route, before: "saying bye", &actions),
                speaksFor(session, installationId, on: route, &actions)
            else { break }
            drop(route, reason: .left, &actions)
        case .accepted(let notifications, let after):
            plan(notifications, after: after, now: now, &actions)
        case .loaded(let installationId, let route, let deliveries, let complete, let sentBefore):
            loaded(installationId, route: route, deliveries, complete: complete, sentBefore: sentBefore, now: now, &actions)
        case .unreachable(let route):
            drop(route, reason: .unreachable, &actions)
        case .userChanged(let change):
            for installation in index.installations(ofUser: change.userId) where installation.installationId != change.origin {
                if let route = routes[installation.installationId] {
                    actions.append(.reply(route, .signal(AgentSignal(userId: change.userId, sequence: change.sequence))))
                    counters.signals += 1
                }
            }
        case .shards(let map):
            shards = map
            // Sessions of shards no longer held here go to the shard's new owner, or try again later.
            for (route, session) in sessions.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) })
            where !map.owned.contains(Shards.of(session.installationId)) {
                redirect(route, session.installationId, &actions)
                drop(route, reason: .moved, &actions)
            }
        case .storeRenewed:
            storeRenewed(&actions)
        case .loadFailed(let installationId, let route):
            // The store did not answer: the session ends, and the agent's next hello loads again.
            guard let session = sessions[route], session.installationId == installationId, session.loading else { break }
            drop(route, reason: .storeUnavailable, &actions)
        case .userStreamGap:
            // A signal carries no content, so a missed one is made up for by signalling every user agent.
            for (id, route) in routes.sorted(by: { $0.key < $1.key }) {
                guard let user = index.installation(id)?.userId else { continue }
                actions.append(.reply(route, .signal(AgentSignal(userId: user, sequence: .max))))
                counters.signals += 1
            }
        case .tick:
            reloadSome(&actions)
            resendDue(now: now, &actions)
            feedStarved(now: now, &actions)
            if now.timeIntervalSince(lastSilenceCheck) >= min(1, settings.silenceAfter / 4) {
                lastSilenceCheck = now
                parked.removeAll { $0.notification.expiresAt <= now }
                let cutoff = now.addingTimeInterval(-settings.silenceAfter)
                let silent = sessions.filter { $0.value.lastSeen < cutoff }.map(\.key)
                for route in silent.sorted(by: { $0.lexicographicallyPrecedes($1) }) { drop(route, reason: .silent, &actions) }
            }
        }
        return actions
    }

    // MARK: Sessions

    private mutating func hello(
        route: Route, peerKey: String?, installationId: String, registered: UInt64?, now: Date, _ actions: inout [DispatchAction]
    ) {
        if let session = sessions[route] {
            guard speaksFor(session, installationId, on: route, &actions) else { return }
            session.lastSeen = now
            return
        }
        guard let peerKey else {
            refuse(route, .unauthorized, "the agent channel needs a CURVE connection whose key is known to the dispatcher", &actions)
            return
        }
        guard registryRead else {
            // Not knowing yet is not "not registered": the agent says hello again shortly.
            refuse(route, .unavailable, "the dispatcher is still reading the registry; say hello again shortly", &actions)
            return
        }
        guard let installation = index.installation(installationId) else {
            refuse(route, .notFound, "installation '\(installationId)' is not registered; register it, then say hello again", &actions)
            return
        }
        if let shards, !shards.owned.contains(Shards.of(installationId)) {
            redirect(route, installationId, &actions)
            return
        }
        if let registered, (installation.version ?? 0) < registered,
            parked.contains(where: { $0.shards[Shards.of(installationId)] != nil && $0.notification.expiresAt > now })
        {
            // What it catches up on is planned for it as it registered: its tags may have changed.
            refuse(route, .unavailable,
                   "the dispatcher has not read version \(registered) of installation '\(installationId)' from the registry yet; say hello again shortly",
                   &actions)
            return
        }
        guard installation.pushChannel == peerKey else {
            refuse(route, .forbidden,
                   "installation '\(installationId)' is bound to another device key; only the agent holding that key may receive for it (a Manage key can rebind a device that lost its key)",
                   &actions)
            return
        }
        if let previous = routes[installationId] {
            // The same device on a new connection, as after a reconnect: the new one wins.
            drop(previous, reason: .replaced, &actions)
        } else if sessions.count >= settings.maxAgents {
            refuse(route, .unavailable,
                   "this dispatcher serves at most \(settings.maxAgents) agents (limits.agents); say hello again later", &actions)
            return
        }
        let session = Session(installationId: installationId, lastSeen: now)
        session.key = peerKey
        routes[installationId] = route
        counters.connected += 1
        actions.append(.note(.connected(installationId)))
        // The broadcasts stored once while it was away, as they would be planned for it now; the
        // store keeps those after its position, and marks it here, in the same write.
        let owed = owed(installationId, since: installation.version, now: now)
        if !owed.isEmpty || backlog.contains(installationId) {
            session.loading = true
            sessions[route] = session
            actions.append(.load(installationId: installationId, route: route, limit: settings.loadLimit, catchUp: owed))
        } else {
            actions.append(.position(installationId, .here))
            session.welcomed = true
            sessions[route] = session
            actions.append(.reply(route, .welcome(AgentWelcome(installationId: installationId, pending: 0))))
        }
    }

    /// Drops a session whose installation is gone or now bound to another key.
    private mutating func checkBinding(_ route: Route, _ actions: inout [DispatchAction]) {
        guard let session = sessions[route] else { return }
        let installation = index.installation(session.installationId)
        guard installation == nil || installation?.pushChannel != session.key else { return }
        actions.append(.reply(route, .error(ErrorReply(
            code: .forbidden, message: "installation '\(session.installationId)' was deleted or bound to another key"))))
        drop(route, reason: .unbound, &actions)
    }

    private mutating func drop(_ route: Route, reason: DispatchNote.DropReason, _ actions: inout [DispatchAction]) {
        guard let session = sessions.removeValue(forKey: route) else { return }
        if routes[session.installationId] == route { routes[session.installationId] = nil }
        for id in session.known {
            if let flight = inFlight.removeValue(forKey: id) { resends.remove(id, from: flight.bucket) }
        }
        if !session.known.isEmpty || session.spilled || session.loading { backlog.insert(session.installationId) }
        // Where it left: broadcasts planned after this are parked for it. A shard served elsewhere
        // now is its new owner's to close (at its cursor, `DeliveryStore.closePositions`).
        let shard = Shards.of(session.installationId)
        if reason != .moved, shards?.owned.contains(shard) ?? true {
            actions.append(.position(session.installationId, .away(after: shards?.cursors[shard] ?? planned)))
        }
        counters.dropped[reason, default: 0] += 1
        actions.append(.note(.dropped(session.installationId, reason)))
    }

    /// The store was reached in a new session, maybe of another history: what is in memory may be
    /// ahead of it, so every session keeps its connection and loads again from the store, and the
    /// installations waiting there are read again (`.backlog`). A delivery the store still has is
    /// sent again, and agents show each notification once.
    private mutating func storeRenewed(_ actions: inout [DispatchAction]) {
        starved = FIFO()
        isStarved.removeAll()
        reloads = FIFO()
        reloading.removeAll()
        for (route, session) in sessions.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            for id in session.known {
                if let flight = inFlight.removeValue(forKey: id) { resends.remove(id, from: flight.bucket) }
            }
            session.known.removeAll()
            session.queue.removeAll()
            session.head = 0
            session.inFlight = 0
            session.sentBefore.removeAll()
            session.spilled = false
            session.loading = true
            reloads.append(route)
            reloading.insert(route)
        }
        counters.storeRenewals += 1
        reloadSome(&actions)
    }

    /// The next sessions waiting to load again after a new session of the store, at most
    /// `reloadsPerTick`; one that has ended meanwhile loads when its agent says hello again.
    private mutating func reloadSome(_ actions: inout [DispatchAction]) {
        var count = 0
        while count < settings.reloadsPerTick, let route = reloads.popFirst() {
            guard reloading.remove(route) != nil, let session = sessions[route] else { continue }
            actions.append(.load(installationId: session.installationId, route: route, limit: settings.loadLimit, catchUp: []))
            count += 1
        }
    }

    /// Tells an agent which dispatcher serves its installation, or to say hello again later when
    /// its shard has no owner yet.
    private mutating func redirect(_ route: Route, _ installationId: String, _ actions: inout [DispatchAction]) {
        let shard = Shards.of(installationId)
        if let endpoint = shards?.owners[shard] {
            counters.redirected += 1
            actions.append(.reply(route, .redirect(AgentRedirect(installationId: installationId, endpoint: endpoint))))
        } else {
            refuse(route, .unavailable, "no dispatcher serves shard \(shard) of installation '\(installationId)' yet; say hello again", &actions)
        }
    }

    /// The session on `route`; none, and the agent is told to say hello before `what`, when it has none.
    private mutating func session(on route: Route, before what: String, _ actions: inout [DispatchAction]) -> Session? {
        guard let session = sessions[route] else {
            refuse(route, .unauthorized, "say hello before \(what): this connection has no session", &actions)
            return nil
        }
        return session
    }

    /// Whether the session on `route` speaks for `installationId`; one connection speaks for one
    /// installation, and a message for another is refused.
    private mutating func speaksFor(_ session: Session, _ installationId: String, on route: Route, _ actions: inout [DispatchAction]) -> Bool {
        guard session.installationId == installationId else {
            refuse(route, .forbidden, "this connection speaks for installation '\(session.installationId)'; connect again to speak for another", &actions)
            return false
        }
        return true
    }

    private mutating func refuse(_ route: Route, _ code: ErrorCode, _ message: String, _ actions: inout [DispatchAction]) {
        counters.refused += 1
        actions.append(.reply(route, .error(ErrorReply(code: code, message: message))))
    }

    // MARK: Planning and delivery

    private mutating func plan(_ notifications: [AcceptedNotification], after: UInt64?, now: Date, _ actions: inout [DispatchAction]) {
        var touched: [Route] = []
        var seen: Set<Route> = []
        // A batch pulled after `after` holds every notification past it, so it can plan only the
        // shards planned that far already: a shard behind it (one just taken over, while the pull
        // was under way) would skip what lies between, and waits for a pull from its own cursor.
        let eligible = shards.map { map in map.owned.filter { shard in (map.cursors[shard] ?? 0) >= (after ?? 0) } }
        for notification in notifications {
            var plans: [PlannedDelivery]
            var planning: Set<Int>? = nil
            // A broadcast is stored once: agents away are counted, not given a delivery each.
            var parkedCounts: [Int: Int] = [:]
            let parks: ((String) -> Bool)? = settings.parkBroadcasts && Self.parks(notification, now: now)
                ? { [routes] in routes[$0] == nil } : nil
            if let shards, let eligible {
                // Only this dispatcher's shards, and only those not planned for this notification yet.
                let sequence = notification.sequence
                plans = resolver.plan(notification, index: index, now: now, include: {
                    let shard = Shards.of($0)
                    return eligible.contains(shard) && sequence > (shards.cursors[shard] ?? 0)
                }, parking: parks, parked: &parkedCounts)
                planning = eligible.filter { (shards.cursors[$0] ?? 0) < sequence }
                for shard in planning ?? [] { self.shards?.cursors[shard] = sequence }
            } else {
                plans = resolver.plan(notification, index: index, now: now, parking: parks, parked: &parkedCounts)
                planned = max(planned, notification.sequence)
            }
            if !parkedCounts.isEmpty { park(notification, parkedCounts.mapValues { _ in registryAt }) }
            // A platform the hub has no delivery path to: failed at once, with its reason, never sent.
            // Consecutive plans mostly share a platform, whose answer is kept rather than looked up again.
            var lastPlatform: (name: String, served: Bool)?
            let platforms = settings.platforms(of: notification.send.hub)
            for i in plans.indices {
                let platform = plans[i].platform
                let served = lastPlatform.flatMap { $0.name == platform ? $0.served : nil } ?? platforms.contains(platform)
                lastPlatform = (platform, served)
                guard !served else { continue }
                plans[i].unreachable = Platform(name: plans[i].platform) == nil ? "UnknownPlatform" : "PnsUnavailable"
                counters.failed += 1
            }
            if plans.isEmpty, let reason = TargetResolver.unplannable(notification.send) {
                actions.append(.note(.unplanned(notification.notificationId, reason)))
            }
            actions.append(.record(notification, plans, shards: planning, parked: ParkedCounts(counts: parkedCounts, registryAt: parkedCounts.isEmpty ? 0 : registryAt)))
            counters.planned += plans.count
            counters.parked += parkedCounts.values.reduce(0, +)
            guard notification.expiresAt > now else { continue }
            for plan in plans where plan.unreachable == nil {
                // A phone or a browser: its platform's push service takes it from here.
                guard plan.platform == Platform.linux.rawValue else {
                    actions.append(.push(plan, notificationId: notification.notificationId))
                    continue
                }
                guard let route = routes[plan.installationId], let session = sessions[route] else {
                    backlog.insert(plan.installationId)
                    continue
                }
                let delivery = AgentDelivery(
                    deliveryId: plan.deliveryId, notificationId: notification.notificationId, installationId: plan.installationId,
                    template: plan.template, payload: plan.payload, expiresAt: plan.expiresAt, rich: plan.rich)
                _ = session.enqueue(delivery, key: plan.key, limit: settings.queueLimit)
                if seen.insert(route).inserted { touched.append(route) }
            }
        }
        for route in touched { pump(route, now: now, &actions) }
    }

    /// Whether a notification is stored once for the agents away: a broadcast to tags or
    /// templates, or to everyone. A send to installations or a user is per device by nature, and
    /// a test send keeps its results per device.
    static func parks(_ notification: AcceptedNotification, now: Date) -> Bool {
        let send = notification.send
        return send.test != true && send.installationId == nil && send.installationIds == nil && send.userId == nil
            && notification.expiresAt > now && TargetResolver.unplannable(send) == nil
    }

    /// Keeps a broadcast parked in `shards` (each with the registry sequence it was planned at),
    /// with what was parked of it before.
    private mutating func park(_ notification: AcceptedNotification, _ shards: [Int: UInt64]) {
        if let at = parked.firstIndex(where: { $0.notification.notificationId == notification.notificationId }) {
            parked[at].shards.merge(shards) { max($0, $1) }
            return
        }
        let entry = ParkedBroadcast(notification: notification, shards: shards)
        let at = parked.lastIndex { $0.notification.sequence < notification.sequence }.map { $0 + 1 } ?? 0
        parked.insert(entry, at: at)
    }

    /// The deliveries of parked broadcasts owed to the installation under `key` if it was away,
    /// oldest first: each broadcast parked in its shard when the index had its form of `version`
    /// (or a later one), as planned for it now. The store keeps those after its position.
    func owed(_ key: String, since version: UInt64?, now: Date) -> [OwedDelivery] {
        guard !parked.isEmpty else { return [] }
        let shard = Shards.of(key)
        var owed: [OwedDelivery] = []
        var resolver = TargetResolver()
        for broadcast in parked where broadcast.notification.expiresAt > now {
            guard let at = broadcast.shards[shard], at >= version ?? 0 else { continue }
            for plan in resolver.plan(broadcast.notification, for: key, index: index, now: now) where plan.isPlainAgentDelivery {
                owed.append(OwedDelivery(sequence: broadcast.notification.sequence, notificationId: broadcast.notification.notificationId, plan: plan))
            }
        }
        return owed
    }

    /// Applies a registry change. An installation whose agent is away keeps the broadcasts it is
    /// owed that still reach it: they become its own deliveries, since its new version is past
    /// them. A tag added brings nothing older; a tag removed stops what it brought.
    private mutating func changed(_ change: InstallationChanged, now: Date, _ actions: inout [DispatchAction]) {
        let id = change.installationId
        let before = index.installation(id)
        let served = shards?.owned.contains(Shards.of(id)) ?? true
        let wasOwed = before != nil && routes[id] == nil && served ? owed(id, since: before?.version, now: now) : []
        index.apply(change)
        registryAt = max(registryAt, change.installation?.version ?? 0)
        if !wasOwed.isEmpty, change.change == .upserted {
            let old = Set(wasOwed.map(\.plan.key))
            let kept = owed(id, since: before?.version, now: now).filter { old.contains($0.plan.key) }
            if !kept.isEmpty {
                actions.append(.keepOwed(id, kept))
                backlog.insert(id)
            }
        }
        if let route = routes[id] { checkBinding(route, &actions) }
    }

    private mutating func loaded(
        _ installationId: String, route: Route, _ deliveries: [AgentDelivery], complete: Bool, sentBefore: Set<String>, now: Date,
        _ actions: inout [DispatchAction]
    ) {
        // A load for a session that has since gone is dropped; a new session loads for itself.
        guard let session = sessions[route], session.installationId == installationId else { return }
        session.loading = false
        if complete { backlog.remove(installationId) }
        session.spilled = !complete
        var fresh = 0
        for delivery in deliveries {
            let key = DeliveryKey(delivery.deliveryId)
            guard session.enqueue(delivery, key: key, limit: settings.queueLimit) else { continue }
            fresh += 1
            if sentBefore.contains(delivery.deliveryId) { session.sentBefore.insert(key) }
        }
        if !session.welcomed {
            session.welcomed = true
            actions.append(.reply(route, .welcome(AgentWelcome(installationId: installationId, pending: fresh))))
        }
        pump(route, now: now, &actions)
    }

    /// Sends from a session's queue while its window has room; loads more when the store has more.
    private mutating func pump(_ route: Route, now: Date, _ actions: inout [DispatchAction]) {
        guard let session = sessions[route] else { return }
        while session.inFlight < settings.window, inFlight.count < settings.maxInFlight, let (key, delivery) = session.dequeue() {
            let again = !session.sentBefore.isEmpty && session.sentBefore.remove(key) != nil
            guard delivery.expiresAt > now else {
                session.known.remove(key)
                continue
            }
            session.inFlight += 1
            let bucket = resends.push(due: now.addingTimeInterval(session.resendTimeout(settings)), id: key)
            inFlight[key] = InFlight(delivery: delivery, route: route, attempts: 1, sentAt: now, bucket: bucket)
            actions.append(.send(route, delivery))
            // One sent to an earlier session (the agent reconnected, or another dispatcher had it) is
            // sent again: counted as a resend, so that sent = acknowledged + failed + expired + waiting.
            if again { counters.resent += 1 } else { counters.sent += 1 }
        }
        if session.waiting == 0 && session.spilled && !session.loading {
            session.loading = true
            actions.append(.load(installationId: session.installationId, route: route, limit: settings.loadLimit, catchUp: []))
        }
        if session.waiting > 0 && session.inFlight < settings.window && isStarved.insert(route).inserted {
            starved.append(route)
        }
    }

    /// Gives room freed under `maxInFlight` to the sessions that waited for it, in turn.
    private mutating func feedStarved(now: Date, _ actions: inout [DispatchAction]) {
        while inFlight.count < settings.maxInFlight, let route = starved.popFirst() {
            isStarved.remove(route)
            pump(route, now: now, &actions)
        }
    }

    private mutating func acknowledge(route: Route, _ ack: AgentAck, now: Date, _ actions: inout [DispatchAction]) {
        guard let session = session(on: route, before: "acknowledging", &actions) else { return }
        session.lastSeen = now
        let failures = ack.failures ?? []
        // Each id is hashed once, here; the store takes the same keys.
        let acknowledged = ack.deliveryIds.map { DeliveryKey($0) }
        for id in acknowledged + failures.map({ DeliveryKey($0.deliveryId) }) {
            // An id not in flight may still be pending in the store (sent before a restart): the store
            // records it if it belongs to this installation, and ignores it otherwise.
            guard session.known.remove(id) != nil else {
                counters.unknownAcks += 1
                continue
            }
            if let flight = inFlight.removeValue(forKey: id) {
                resends.remove(id, from: flight.bucket)
                session.inFlight -= 1
                // Only a delivery sent once says how long this agent takes (Karn's rule).
                if flight.attempts == 1 { session.observe(roundTrip: now.timeIntervalSince(flight.sentAt)) }
            }
        }
        if !acknowledged.isEmpty {
            counters.acknowledged += acknowledged.count
            actions.append(.acknowledge(installationId: session.installationId, deliveryIds: acknowledged))
        }
        if !failures.isEmpty {
            counters.failed += failures.count
            actions.append(.fail(installationId: session.installationId, failures))
        }
        pump(route, now: now, &actions)
        feedStarved(now: now, &actions)
    }

    /// Sends again what is still unacknowledged when its time comes, backing off per delivery.
    private mutating func resendDue(now: Date, _ actions: inout [DispatchAction]) {
        for id in resends.popDue(now: now, limit: settings.maxResendsPerTick) {
            guard var flight = inFlight[id], let session = sessions[flight.route] else { continue }
            if flight.delivery.expiresAt <= now {
                inFlight[id] = nil
                session.known.remove(id)
                session.inFlight -= 1
                pump(flight.route, now: now, &actions)
                continue
            }
            flight.attempts += 1
            let delay = min(settings.maxResendInterval, session.resendTimeout(settings) * pow(2, Double(flight.attempts - 1)))
            flight.bucket = resends.push(due: now.addingTimeInterval(delay), id: id)
            inFlight[id] = flight
            actions.append(.send(flight.route, flight.delivery))
            counters.resent += 1
        }
    }

    /// The platforms with a delivery path, as push services are configured or removed: the
    /// default hub's, or with `hub` (its qualifier) another hub's, whose push credentials are its own.
    public mutating func setPlatforms(_ platforms: Set<String>, hub: String? = nil) {
        let served = platforms.union([Platform.linux.rawValue])
        if let hub {
            settings.hubPlatforms[hub] = served
        } else {
            settings.platforms = served
        }
    }

    // MARK: Queries

    public var sessionCount: Int { sessions.count }
    public var inFlightCount: Int { inFlight.count }
    public var backlogCount: Int { backlog.count }
    public func route(of installationId: String) -> Route? { routes[installationId] }
    /// Whether the store may hold unacknowledged deliveries for the installation.
    public func hasBacklog(_ installationId: String) -> Bool { backlog.contains(installationId) }

    /// Where an installation is served, as this dispatcher (its agent endpoint `advertised`) knows
    /// it: one dispatcher with no shard map serves every shard; with one, the lease holder does.
    public func placement(of installationId: String, advertised: String) -> Placement {
        let shard = Shards.of(installationId)
        let servedBy = shards.map { $0.owned.contains(shard) ? advertised : $0.owners[shard] } ?? advertised
        let connected = routes[installationId].map { sessions[$0] != nil } ?? false
        return Placement(installationId: installationId, shard: shard, servedBy: servedBy, askedDispatcher: advertised, connected: connected)
    }
    public func installation(on route: Route) -> String? { sessions[route]?.installationId }
}

/// The ROUTER identity of one agent connection.
public typealias Route = Data

public struct DispatcherSettings: Sendable, Equatable {
    /// Seconds without an acknowledgement before a delivery is sent again; doubled per resend.
    public var resendAfter: TimeInterval = 5
    public var maxResendInterval: TimeInterval = 60
    /// Seconds without a word from an agent before its session is dropped.
    public var silenceAfter: TimeInterval = 15
    /// Deliveries in flight per session; the rest wait their turn.
    public var window = 256
    /// Deliveries held in memory per session; more stay in the store and are loaded as the queue drains.
    public var queueLimit = 2_048
    /// Deliveries loaded from the store at a time.
    public var loadLimit = 500
    /// Resends per tick, so that a burst of them cannot starve new deliveries.
    public var maxResendsPerTick = 2_000
    /// Sessions loaded again per tick after a new session of the store (a store read each).
    public var reloadsPerTick = 100
    /// Deliveries in flight across all sessions. A broadcast to many agents goes out as fast as
    /// they acknowledge, so that the queues in front of them stay short and a delivery waits in
    /// memory rather than in a socket buffer, where it would outlive its resend time.
    public var maxInFlight = 20_000
    /// Sessions at once; a hello beyond it is refused with `unavailable`, and the agent tries again.
    public var maxAgents = 100_000
    /// Whether a broadcast is stored once for the agents away, who catch up when they come back
    /// (`ParkedBroadcast`), rather than as a delivery each.
    public var parkBroadcasts = true
    /// Platforms the dispatcher delivers to. A delivery to any other is counted as failed
    /// (PnsUnavailable) in its notification's outcome, never as delivered.
    public var platforms: Set<String> = [Platform.linux.rawValue]
    /// Each other hub's platforms, by its qualifier; a hub not here has its agents alone.
    public var hubPlatforms: [String: Set<String>] = [:]

    /// The platforms with a delivery path for a send of `hub` (its qualifier; nil: the default hub).
    public func platforms(of hub: String?) -> Set<String> {
        guard let hub else { return platforms }
        return hubPlatforms[hub] ?? [Platform.linux.rawValue]
    }

    public init() {}

    /// Agent heartbeats without an acknowledgement before a delivery is sent again, up to
    /// `maxResendAfter`. A live connection loses nothing (a closed one ends its session, and the
    /// next one loads what is pending), so a resend is only for a delivery dropped at a full queue
    /// or an acknowledgement the agent could not send: it waits long enough for a slow agent.
    public static let resendHeartbeats = 6
    /// The longest wait for an acknowledgement before the first resend, however long the heartbeat.
    public static let maxResendAfter: TimeInterval = 30
    /// Agent heartbeats of silence before a session ends (at least 2 s).
    public static let silenceHeartbeats = 3

    /// The settings for agents that say hello every `agentHeartbeat` seconds.
    public init(agentHeartbeat: TimeInterval, maxAgents: Int) {
        resendAfter = min(Self.maxResendAfter, agentHeartbeat * Double(Self.resendHeartbeats))
        silenceAfter = max(2.0, agentHeartbeat * Double(Self.silenceHeartbeats))
        self.maxAgents = maxAgents
    }

    public init(resendAfter: TimeInterval, silenceAfter: TimeInterval) {
        self.resendAfter = resendAfter
        self.silenceAfter = silenceAfter
    }
}

public enum DispatchEvent: Sendable {
    /// At start: installations with unacknowledged deliveries in the store.
    case backlog(Set<String>)
    /// At start, or as shards are taken: the broadcasts parked in the store for them, and (with
    /// one dispatcher) its cursor.
    case parked([ParkedBroadcast], cursor: UInt64?)
    case snapshot(RegistrySnapshot)
    case installationChanged(InstallationChanged)
    /// An agent's hello on a connection; `peerKey` is the connection's CURVE key, nil when it has
    /// none; `registered`: the registry version its last registration stored, where it says.
    case hello(route: Route, peerKey: String?, installationId: String, registered: UInt64? = nil)
    case ack(route: Route, AgentAck)
    /// The agent on `route` is stopping.
    case bye(route: Route, installationId: String)
    /// Notifications pulled from the publish service, oldest first: every one after `after` up to
    /// the last (nil: after wherever each shard is).
    case accepted([AcceptedNotification], after: UInt64? = nil)
    /// The answer to a `.load`: the installation's unacknowledged deliveries, oldest first;
    /// `complete` when there were no more than the limit. `sentBefore`: those already sent once (to
    /// an earlier session, or by another dispatcher), whose sending now is counted as a resend.
    case loaded(installationId: String, route: Route, [AgentDelivery], complete: Bool, sentBefore: Set<String> = [])
    /// A send found the connection gone.
    case unreachable(route: Route)
    /// The shards this dispatcher now serves, as its leases were renewed, taken or lost.
    case shards(ShardMap)
    case userChanged(UserNotificationsChanged)
    /// The sync store's stream skipped a sequence number.
    case userStreamGap
    /// The store was reached in a new session (after a lost connection, or a failover): sessions
    /// load their deliveries again from it.
    case storeRenewed
    /// A `.load` could not be read from the store.
    case loadFailed(installationId: String, route: Route)
    case tick
}

public enum DispatchAction: Equatable, Sendable {
    /// Store: the notification's deliveries and outcome, and the cursor past it: the one cursor
    /// (`shards` nil), or the cursors of the shards it was planned for here.
    /// `parked`: the deliveries to agents away, by shard, stored once (`ParkedBroadcast`).
    case record(AcceptedNotification, [PlannedDelivery], shards: Set<Int>? = nil, parked: ParkedCounts = ParkedCounts())
    /// Socket: a delivery to the agent on the route.
    case send(Route, AgentDelivery)
    /// A delivery to a phone or a browser, through its platform's push service.
    case push(PlannedDelivery, notificationId: String)
    /// Socket: a welcome, signal or error to the agent on the route.
    case reply(Route, AgentFrame)
    /// Store: acknowledgements from an installation's agent.
    case acknowledge(installationId: String, deliveryIds: [DeliveryKey])
    /// Store: deliveries the agent gave up on.
    case fail(installationId: String, [DeliveryFailure])
    /// Store read: the installation's unacknowledged deliveries, answered with `.loaded`; first, in
    /// one write, the broadcasts it is `catchUp` owed after its position become its deliveries,
    /// and it is marked here.
    case load(installationId: String, route: Route, limit: Int, catchUp: [OwedDelivery])
    /// Store: where an installation's agent is, for the broadcasts parked while it is away.
    case position(String, AgentPosition)
    /// Store: broadcasts an installation away is owed after its position, made its deliveries
    /// before its tags change (`Dispatcher.changed`).
    case keepOwed(String, [OwedDelivery])
    /// Something worth a log line.
    case note(DispatchNote)
}

public enum DispatchNote: Equatable, Sendable {
    public enum DropReason: String, Sendable, CaseIterable {
        /// Nothing heard for `silenceAfter`.
        case silent
        /// The agent said goodbye: it is stopping.
        case left
        /// The same installation connected again.
        case replaced
        /// A send found the connection closed.
        case unreachable
        /// The installation was deleted or bound to another key.
        case unbound
        /// Its shard is served by another dispatcher now.
        case moved
        /// Its deliveries could not be loaded from the store.
        case storeUnavailable
    }

    case connected(String)
    case dropped(String, DropReason)
    /// A notification that reaches no one for a reason in it (an expression this build cannot read).
    case unplanned(String, String)
}

/// Totals since start, for metrics.
public struct DispatcherCounters: Sendable, Equatable {
    public var planned = 0
    /// Deliveries to agents away, stored once with their broadcast.
    public var parked = 0
    /// Deliveries sent for the first time.
    public var sent = 0
    /// Sends of a delivery sent before: after its resend timeout, or to a new session of the same
    /// agent (a lost connection, or one another dispatcher had).
    public var resent = 0
    public var acknowledged = 0
    public var failed = 0
    /// Acknowledgements for deliveries not in flight: late repeats, or sent before a restart.
    public var unknownAcks = 0
    public var connected = 0
    public var refused = 0
    public var signals = 0
    /// Hellos answered with the dispatcher that serves the installation.
    public var redirected = 0
    /// New sessions of the store, after which every session loaded again from it.
    public var storeRenewals = 0
    public var dropped: [DispatchNote.DropReason: Int] = [:]
}

/// One agent connection speaking for one installation. A class, so that the dispatcher changes a
/// session where it lives: a struct copied out of the dictionary would copy its queue and set on
/// every change.
final class Session {
    let installationId: String
    var key: String?
    var lastSeen: Date
    /// Waiting to be sent, oldest first; `head` is the next one.
    var queue: [(key: DeliveryKey, delivery: AgentDelivery)] = []
    var head = 0
    var inFlight = 0
    /// Delivery ids queued or in flight, so that a load from the store adds each once. Room for a
    /// few from the start: grown one step at a time, a new session's set hashed every id again.
    var known = Set<DeliveryKey>(minimumCapacity: 16)
    /// Queued deliveries that were sent before, to an earlier session: sending them is a resend.
    var sentBefore: Set<DeliveryKey> = []
    var loading = false
    /// The store holds deliveries the queue had no room for.
    var spilled = false
    var welcomed = false
    /// Smoothed acknowledgement time and its variation, as TCP estimates its round trip (RFC 6298).
    var smoothedRoundTrip: TimeInterval?
    var roundTripVariation: TimeInterval = 0

    func observe(roundTrip sample: TimeInterval) {
        guard let smoothed = smoothedRoundTrip else {
            smoothedRoundTrip = sample
            roundTripVariation = sample / 2
            return
        }
        roundTripVariation = 0.75 * roundTripVariation + 0.25 * abs(smoothed - sample)
        smoothedRoundTrip = 0.875 * smoothed + 0.125 * sample
    }

    /// How long to wait for an acknowledgement before sending again: never less than the
    /// configured time, longer for an agent that is slow to answer, so that a busy agent is not
    /// sent what it already has.
    func resendTimeout(_ settings: DispatcherSettings) -> TimeInterval {
        let estimate = (smoothedRoundTrip ?? 0) + 4 * roundTripVariation
        return min(settings.maxResendInterval, max(settings.resendAfter, estimate))
    }

    init(installationId: String, lastSeen: Date) {
        self.installationId = installationId
        self.lastSeen = lastSeen
    }

    /// Queues a delivery once. Returns false when it was known already or the queue is full,
    /// in which case it stays in the store for a later load.
    func enqueue(_ delivery: AgentDelivery, key: DeliveryKey, limit: Int) -> Bool {
        guard waiting < limit else {
            if !known.contains(key) { spilled = true }
            return false
        }
        // One lookup: the insert says whether it was known.
        guard known.insert(key).inserted else { return false }
        queue.append((key, delivery))
        return true
    }

    var waiting: Int { queue.count - head }

    func dequeue() -> (DeliveryKey, AgentDelivery)? {
        guard head < queue.count else { return nil }
        let entry = queue[head]
        head += 1
        if head == queue.count {
            queue.removeAll()
            head = 0
        }
        return entry
    }
}

struct InFlight {
    var delivery: AgentDelivery
    var route: Route
    var attempts: Int
    var sentAt: Date
    /// Where it waits in the resend queue.
    var bucket: DueQueue<DeliveryKey>.Bucket
}

/// A broadcast stored once for the agents that were away when it was planned: each catches up
/// when it comes back, from its position (the last notification planned while it was here), on
/// what still reaches it as it is then.
public struct ParkedBroadcast: Equatable, Sendable {
    public var notification: AcceptedNotification
    /// The shards it was parked in, each with the registry sequence the planning index stood at:
    /// it is owed to an installation of the shard whose version is no later.
    public var shards: [Int: UInt64]

    public init(notification: AcceptedNotification, shards: [Int: UInt64]) {
        self.notification = notification
        self.shards = shards
    }
}

/// What a broadcast parked, by shard, and the registry sequence its planning index stood at.
public struct ParkedCounts: Equatable, Sendable {
    public var counts: [Int: Int]
    public var registryAt: UInt64

    public init(counts: [Int: Int] = [:], registryAt: UInt64 = 0) {
        self.counts = counts
        self.registryAt = registryAt
    }
}

/// A delivery of a parked broadcast, owed to one installation if it is after its position.
public struct OwedDelivery: Equatable, Sendable {
    public var sequence: UInt64
    public var notificationId: String
    public var plan: PlannedDelivery

    public init(sequence: UInt64, notificationId: String, plan: PlannedDelivery) {
        self.sequence = sequence
        self.notificationId = notificationId
        self.plan = plan
    }
}

/// Where an installation's agent is, as the store keeps it for parked broadcasts.
public enum AgentPosition: Equatable, Sendable {
    /// Connected: what is planned now is its own delivery.
    case here
    /// Away since the notification numbered `after` was planned: what is parked later is owed.
    case away(after: UInt64)
}
