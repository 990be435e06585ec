import Auth
import DBus
import Foundation
import HubProtocol
import ServiceKit

/// The agent as a UnifiedPush distributor on the session bus (`org.unifiedpush.Distributor.nh`,
/// serving `org.unifiedpush.Distributor2` and `Distributor1`). An app registers with a token and is
/// given an endpoint at the hub's gateway; what its server posts there comes to this agent as a
/// delivery, and is handed to the app's connector (`Message`), started by D-Bus activation when it
/// is not running. A delivery is acknowledged once the connector has it. For an app that cannot be
/// reached, the agent takes its messages into its own store and acknowledges them, so that they
/// do not hold the installation's delivery window; they are handed over when the app registers
/// again or appears on the bus, until their time to live ends.
final class UnifiedPushDistributor {
    static let defaultName = "org.unifiedpush.Distributor.nh"
    /// Message calls in flight to one app; D-Bus keeps their order.
    static let pipeline = 16
    /// How long a connector may take to answer, its start by activation included.
    static let callTimeout = Duration.seconds(30)
    /// How often an app that could not be reached is tried again.
    static let retryEvery: TimeInterval = 30

    enum Disposition: Equatable {
        case wait
        case acknowledge
        case fail(String)
    }

    let enabled: Bool
    let name: String
    let store: AppStore
    /// The endpoint URLs' start: the gateway's address (`namespace`) and `up/`.
    let endpointBase: String
    /// Registers the installation with the apps' endpoints now; throws what the registry answered.
    var registerEndpoints: () throws -> Void = {}
    /// Acknowledges deliveries (the app has them, or the agent keeps them) and reports failed ones.
    var acknowledge: ([String], [DeliveryFailure]) -> Void = { _, _ in }

    private let bus: SessionBus
    private let logger: Logger
    /// Deliveries in a Message call, by endpoint id.
    private var handing: [String: Set<String>] = [:]
    /// Apps that could not be reached, by endpoint id: why, and when.
    private var unreachable: [String: (reason: String, at: Date)] = [:]
    /// Apps whose failure was logged, until they take a message again.
    private var reported: Set<String> = []
    private var owner: Bool?
    private(set) var handed = 0
    /// Where the power supplies are read, for the urgency a message needs.
    private let powerSupplies: URL
    /// The least urgency handed to apps now; less urgent messages are kept until the power allows.
    private(set) var minimumUrgency: PushUrgency = .veryLow

    init(environment: [String: String], bus: SessionBus, store: AppStore, endpointBase: String, logger: Logger) {
        enabled = environment["NH_AGENT_UNIFIEDPUSH"] != "0"
        name = environment["NH_AGENT_UNIFIEDPUSH_NAME"] ?? Self.defaultName
        self.bus = bus
        self.store = store
        self.endpointBase = endpointBase
        self.logger = logger
        powerSupplies = URL(fileURLWithPath: environment["NH_AGENT_POWER_SUPPLY"] ?? "/sys/class/power_supply", isDirectory: true)
        minimumUrgency = PowerState.read(root: powerSupplies).minimumUrgency
        guard enabled else { return }
        bus.use(connected: { [unowned self] in try self.connected($0) }, disconnected: { [unowned self] in self.disconnected() })
    }

    /// The endpoint URL that `secret` makes for this installation.
    func endpoint(_ app: RegisteredApp) -> String { endpointBase + app.secret }

    var health: [String: String] {
        guard enabled else { return ["unifiedpush": "off (NH_AGENT_UNIFIEDPUSH=0)"] }
        let state: String
        switch (bus.address, bus.connection, owner) {
        case (nil, _, _): state = "no session bus"
        case (_, nil, _): state = "unreachable: \(bus.unreachable ?? "connecting")"
        case (_, _, true?): state = "serving as \(name)"
        case (_, _, false?): state = "\(name) is taken by another program"
        default: state = "asking for \(name)"
        }
        var details = [
            "unifiedpush": state, "unifiedpushHanded": String(handed), "unifiedpushUnreachable": String(unreachable.count),
            "unifiedpushMinimumUrgency": minimumUrgency.rawValue,
        ]
        do {
            details["unifiedpushApps"] = String(try store.apps().count)
        } catch {
            details["unifiedpushAppsError"] = "\(error)"
        }
        return details
    }

    /// What `nh-agent apps` lists.
    func apps() throws -> [AgentApp] {
        try store.apps().map {
            AgentApp(
                service: $0.service, description: $0.description, endpoint: endpoint($0), connector: String($0.connector),
                waiting: try store.waiting(endpointId: $0.endpointId), vapid: $0.vapid != nil)
        }
    }

    /// `nh-agent apps remove APP`: unregisters the app's registrations (APP: its service name,
    /// an endpoint URL or a token); the app's connector hears `Unregistered`.
    func remove(_ app: String) throws {
        // An endpoint given before endpoints stopped naming the installation (`up/{installation}/{secret}`)
        // still reaches its app, and names it here.
        let matching = try store.apps().filter {
            $0.service == app || $0.token == app || endpoint($0) == app || (app.contains("/up/") && app.hasSuffix("/" + $0.secret))
        }
        guard !matching.isEmpty else {
            throw HubError(.notFound, "no app '\(app)' is registered with this agent; nh-agent apps lists them")
        }
        for registration in matching { try unregister(registration, notify: true) }
    }

    // MARK: The bus

    private func connected(_ connection: DBusConnection) throws {
        owner = nil
        try connection.export(path: UnifiedPushRequest.distributorPath) { [unowned self] call in self.serve(call) }
        try connection.addMatch("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged'") {
            [unowned self] message in
            guard message.arguments.count == 3, let service = message.arguments[0].string, message.arguments[2].string?.isEmpty == false
            else { return }
            self.appeared(service)
        }
        try connection.requestName(name) { [unowned self] result in
            switch result {
            case .success(let owned):
                self.owner = owned
                if owned {
                    self.logger.info("serving as a UnifiedPush distributor", ("name", self.name))
                } else {
                    self.logger.warning("another program is the UnifiedPush distributor under this name; apps cannot register here", ("name", self.name))
                }
            case .failure(let error):
                self.logger.warning("could not take the UnifiedPush distributor name", ("name", self.name), ("error", "\(error)"))
            }
        }
        // What was on its way when the bus went, and what waits for apps, goes now.
        unreachable = [:]
        for app in try store.apps() { flush(app) }
    }

    private func disconnected() {
        handing = [:]
        owner = nil
    }

    /// An app's connector came onto the bus: what waits for it goes now.
    private func appeared(_ service: String) {
        // Unique names (":1.42") come and go with every connection; only a waiting app's name matters.
        guard !unreachable.isEmpty, !service.hasPrefix(":") else { return }
        let apps: [RegisteredApp]
        do {
            apps = try store.apps().filter { $0.service == service }
        } catch {
            logger.warning(
                "an app came onto the bus, but its messages cannot be looked up; they stay kept until it comes again", ("service", service),
                ("error", "\(error)"))
            return
        }
        for app in apps where unreachable.removeValue(forKey: app.endpointId) != nil { flush(app) }
    }

    private func serve(_ call: DBusCall) {
        let request = UnifiedPushRequest.parse(interface: call.message.interface, member: call.message.member, arguments: call.message.arguments)
        do {
            switch request {
            case .register(let registration):
                try register(registration, call)
            case .unregister(let token, let connector):
                let app = try store.app(token: token)
                if let app { try unregister(app, notify: false) }
                try call.reply(connector == 2 ? [.stringVariants([])] : [])
                // Unregistered confirms it, as the spec asks.
                let (interface, arguments) = UnifiedPushRequest.unregistered(token: token, connector: connector)
                callConnector(destination: app?.service ?? call.message.sender, interface: interface, member: "Unregistered", arguments, connector: connector)
            case .introspect:
                try call.reply([.string(UnifiedPushRequest.introspection)])
            case .invalid(let why, _):
                logger.warning("a UnifiedPush call was refused", ("method", call.method), ("from", call.message.sender), ("reason", why))
                try call.fail(name: "org.freedesktop.DBus.Error.InvalidArgs", message: why)
            case .invalidRegistration(let why, let connector):
                // The spec has no reason of its own for arguments that do not follow it: the generic one, and what to fix.
                logger.warning("a UnifiedPush registration was refused", ("from", call.message.sender), ("reason", why))
                try call.reply(UnifiedPushRequest.registerReply(failure: "INTERNAL_ERROR", connector: connector, detail: why))
            case .unknown:
                break
            }
        } catch {
            logger.warning("could not answer a UnifiedPush call", ("method", call.method), ("error", "\(error)"))
            // Logged above; a caller gone meanwhile needs no answer.
            try? call.fail(name: "org.freedesktop.DBus.Error.Failed", message: "\(error)")
        }
    }

    private func register(_ registration: UnifiedPushRegistration, _ call: DBusCall) throws {
        let existing = try store.app(token: registration.token)
        if let existing, existing.service != registration.service {
            try call.reply(UnifiedPushRequest.registerReply(
                failure: "UNAUTHORIZED", connector: registration.connector, detail: "this token is registered by another app; make a new one"))
            logger.warning("an app registered with another app's token; refused", ("service", registration.service))
            return
        }
        let app = RegisteredApp(registration, secret: existing?.secret ?? PushEndpointSecret.make())
        try store.save(app, now: Date())
        if existing == nil || existing?.vapid != app.vapid {
            do {
                try registerEndpoints()
            } catch {
                // A new endpoint is only given once the hub has it.
                if let existing { try store.save(existing, now: Date()) } else { try store.remove(token: app.token) }
                let code = (error as? HubError)?.code
                let reason = code == .timeout || code == .unavailable ? "NETWORK" : "INTERNAL_ERROR"
                logger.warning("an app's registration failed: the hub did not take its endpoint", ("service", app.service), ("error", "\(error)"))
                try call.reply(UnifiedPushRequest.registerReply(
                    failure: reason, connector: registration.connector, detail: "the hub did not take the endpoint: \(error)"))
                return
            }
        }
        try call.reply(UnifiedPushRequest.registerReply(failure: nil, connector: registration.connector))
        if existing == nil { logger.info("an app registered for push", ("service", app.service), ("connector", app.connector)) }
        let (interface, arguments) = UnifiedPushRequest.newEndpoint(token: app.token, endpoint: endpoint(app), connector: app.connector)
        callConnector(destination: app.service, interface: interface, member: "NewEndpoint", arguments, connector: app.connector)
        unreachable[app.endpointId] = nil
        flush(app)
    }

    private func unregister(_ app: RegisteredApp, notify: Bool) throws {
        try store.remove(token: app.token)
        handing[app.endpointId] = nil
        unreachable[app.endpointId] = nil
        do {
            try registerEndpoints()
        } catch {
            logger.warning("the hub did not hear of an app's unregistration yet; it will when it answers", ("service", app.service), ("error", "\(error)"))
        }
        logger.info("an app unregistered", ("service", app.service))
        if notify {
            let (interface, arguments) = UnifiedPushRequest.unregistered(token: app.token, connector: app.connector)
            callConnector(destination: app.service, interface: interface, member: "Unregistered", arguments, connector: app.connector)
        }
    }

    /// NewEndpoint and Unregistered: their answers carry nothing, so only a failure is logged.
    private func callConnector(destination: String, interface: String, member: String, _ arguments: [DBusValue], connector: Int) {
        guard let connection = bus.connection else { return }
        do {
            if connector == 1 {
                try connection.send(destination: destination, path: UnifiedPushRequest.connectorPath, interface: interface, member: member, arguments)
            } else {
                try connection.call(
                    destination: destination, path: UnifiedPushRequest.connectorPath, interface: interface, member: member, arguments,
                    timeout: Self.callTimeout
                ) { [logger] result in
                    if case .failure(let error) = result, !error.name.hasPrefix("local.") {
                        logger.info("an app's connector did not take \(member)", ("service", destination), ("error", "\(error)"))
                    }
                }
            }
        } catch {
            logger.info("could not call an app's connector", ("service", destination), ("member", member), ("error", "\(error)"))
        }
    }

    // MARK: Messages

    /// A delivery carrying a push message for an app: kept, then handed over.
    func received(_ delivery: AgentDelivery, _ message: AppPushMessage, now: Date) throws -> Disposition {
        guard let app = try store.app(endpointId: message.endpoint) else {
            return .fail("no app is registered with this agent for endpoint \(message.endpoint) any more")
        }
        guard let bytes = message.bytes else { return .fail("the push message is not base64") }
        if let kept = try store.message(deliveryId: delivery.deliveryId) { return kept.held ? .acknowledge : .wait }
        _ = try store.keep(AppMessage(
            deliveryId: delivery.deliveryId, notificationId: delivery.notificationId, endpointId: message.endpoint, message: bytes,
            expiresAt: delivery.expiresAt, held: false, urgency: message.urgency ?? .normal))
        flush(app)
        return .wait
    }

    /// Every second: forgets what expired, follows the power (what it now allows goes at once), and
    /// tries again the apps that could not be reached.
    func tick(now: Date) throws {
        _ = try store.purge(now: now)
        let minimum = PowerState.read(root: powerSupplies).minimumUrgency
        if minimum != minimumUrgency {
            logger.info("push messages handed to apps from this urgency up, for the power supply", ("urgency", minimum.rawValue))
            let lowered = minimum < minimumUrgency
            minimumUrgency = minimum
            if lowered, enabled { for app in try store.apps() { flush(app) } }
        }
        for (endpointId, state) in unreachable where now.timeIntervalSince(state.at) >= Self.retryEvery {
            unreachable[endpointId] = nil
            if let app = try store.app(endpointId: endpointId) { flush(app) }
        }
    }

    /// Hands the app what waits for it, in order, up to `pipeline` at a time; an app that cannot be
    /// reached has it kept (and acknowledged) instead.
    private func flush(_ app: RegisteredApp) {
        do {
            guard let connection = bus.connection, unreachable[app.endpointId] == nil else {
                try hold(app)
                return
            }
            let inHand = handing[app.endpointId, default: []]
            // Less urgent than the power allows: kept, and acknowledged, until it allows them.
            // On mains power nothing is below it: no store round trip per message.
            if minimumUrgency > .veryLow {
                let kept = try store.hold(endpointId: app.endpointId, except: inHand, below: minimumUrgency)
                if !kept.isEmpty { acknowledge(kept, []) }
            }
            guard inHand.count < Self.pipeline else { return }
            let waiting = try store.messages(endpointId: app.endpointId, now: Date(), limit: Self.pipeline + inHand.count, urgency: minimumUrgency)
            for message in waiting.filter({ !inHand.contains($0.deliveryId) }).prefix(Self.pipeline - inHand.count) {
                handing[app.endpointId, default: []].insert(message.deliveryId)
                hand(message, to: app, over: connection)
            }
        } catch {
            logger.warning("could not hand push messages to an app", ("service", app.service), ("error", "\(error)"))
        }
    }

    private func hand(_ message: AppMessage, to app: RegisteredApp, over connection: DBusConnection) {
        let (interface, arguments) = UnifiedPushRequest.message(token: app.token, bytes: message.message, id: message.deliveryId, connector: app.connector)
        let done: (Result<DBusMessage, DBusError>) -> Void = { [weak self] result in
            guard let self else { return }
            // A connection closing answers every call: what was on its way goes on the next one.
            guard self.bus.connection === connection, connection.isOpen else { return }
            self.handing[app.endpointId]?.remove(message.deliveryId)
            switch result {
            case .success:
                self.delivered(message, app)
            case .failure(let error):
                self.failed(app, error)
            }
        }
        do throws(DBusError) {
            if app.connector == 2 {
                try connection.call(
                    destination: app.service, path: UnifiedPushRequest.connectorPath, interface: interface, member: "Message", arguments,
                    timeout: Self.callTimeout, reply: done)
            } else {
                // Connector1's Message has no answer: a Ping (which starts the app when it may be
                // activated) shows it is there, and the message follows it in order.
                try connection.call(
                    destination: app.service, path: UnifiedPushRequest.connectorPath, interface: "org.freedesktop.DBus.Peer", member: "Ping",
                    timeout: Self.callTimeout
                ) { result in
                    if case .success = result {
                        do throws(DBusError) {
                            try connection.send(
                                destination: app.service, path: UnifiedPushRequest.connectorPath, interface: interface, member: "Message", arguments)
                        } catch {
                            done(.failure(error))
                            return
                        }
                    }
                    done(result)
                }
            }
        } catch {
            handing[app.endpointId]?.remove(message.deliveryId)
            failed(app, error)
        }
    }

    private func delivered(_ message: AppMessage, _ app: RegisteredApp) {
        do {
            if reported.remove(app.endpointId) != nil {
                logger.info("an app takes its push messages again", ("service", app.service))
            }
            try store.handed(message, now: Date())
            handed += 1
            if !message.held { acknowledge([message.deliveryId], []) }
            // The app may have gone meanwhile; what waits goes only to one still registered.
            if let current = try store.app(endpointId: app.endpointId) { flush(current) }
        } catch {
            logger.warning("could not note a push message as handed over", ("delivery", message.deliveryId), ("error", "\(error)"))
        }
    }

    private func failed(_ app: RegisteredApp, _ error: DBusError) {
        // Said once per app until it takes a message again, not at every retry.
        if reported.insert(app.endpointId).inserted {
            logger.notice(
                "an app cannot take its push messages now; the agent keeps them until it registers again or appears",
                ("service", app.service), ("error", "\(error)"))
        }
        unreachable[app.endpointId] = ("\(error)", Date())
        do {
            try hold(app)
        } catch {
            logger.warning("could not keep an app's push messages", ("service", app.service), ("error", "\(error)"))
        }
    }

    /// Takes the app's messages not yet acknowledged into the agent's keeping, and acknowledges them.
    private func hold(_ app: RegisteredApp) throws {
        // Those in a call now are acknowledged when it answers, or held when it fails.
        let ids = try store.hold(endpointId: app.endpointId, except: handing[app.endpointId, default: []])
        if !ids.isEmpty { acknowledge(ids, []) }
    }
}
