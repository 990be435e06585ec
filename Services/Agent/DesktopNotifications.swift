import DBus
import Foundation
import HubProtocol
import ServiceKit

/// Popups through the desktop's notification server, org.freedesktop.Notifications, on one
/// long-lived session-bus connection served from the agent's loop. Every call is asynchronous with
/// a timeout, so a hung server delays only popups, never deliveries, acknowledgements or health.
/// What the person does to a popup (close it, click it, press Dismiss or Snooze) comes back through
/// `onUserAction`. The bus is found in the environment and never started.
final class DesktopNotifications {
    static let service = "org.freedesktop.Notifications"
    static let path = "/org/freedesktop/Notifications"
    static let appName = "nh-agent"
    /// The icon's name in the desktop's theme (`nh-agent.svg`, installed with `nh-agent.desktop`,
    /// which the `desktop-entry` hint names), shown where a popup has no picture of its own.
    static let appIcon = "nh-agent"
    /// What notification-daemon and mate-notification-daemon answer a Notify beyond their 20.
    static let fullError = "org.freedesktop.Notifications.MaxNotificationsExceeded"
    /// How long a Notify may wait for its answer: long, since a server stopped for a while still
    /// shows what it was sent, and only an answer says under which id.
    static let notifyTimeout = Duration.seconds(300)

    /// What the person did to a popup of a user's notification.
    var onUserAction: (String, AgentUserAction.Action) -> Void = { _, _ in }
    /// A user's notification's popup: shown under an id (nil: gone) on the server `owner`, to keep.
    var onPopup: (String, UInt32?, String) -> Void = { _, _, _ in }
    /// A server is ready: show what is current again (with `adopt` for ids kept for this server).
    var onReshow: (String) -> Void = { _ in }

    let enabled: Bool
    private let bus: SessionBus
    private let logger: Logger
    private var core: DesktopCore
    private var connection: DBusConnection? { bus.connection }
    /// When to ask a server that did not answer again (`DesktopCore.Action.askServerAfter`).
    private var askAgainAt: ContinuousClock.Instant?
    /// When to try a server that was full again (`DesktopCore.Action.retryFullAfter`).
    private var retryFullAt: ContinuousClock.Instant?

    init(environment: [String: String], bus: SessionBus, logger: Logger) {
        self.logger = logger
        self.bus = bus
        enabled = environment["NH_AGENT_DESKTOP"] != "0"
        if let grouping = BurstGrouping.from(environment: environment) {
            core = DesktopCore(grouping: grouping)
        } else {
            logger.warning("NH_AGENT_POPUP_BURST is a count of popups, 0 or more; bursts are grouped after 3")
            core = DesktopCore()
        }
        guard enabled else { return }
        if bus.address == nil {
            let display = environment["DISPLAY"] != nil || environment["WAYLAND_DISPLAY"] != nil
            let line = "no desktop session bus (DBUS_SESSION_BUS_ADDRESS is not set, nor $XDG_RUNTIME_DIR/bus); popups are off"
            // A headless host has no desktop to tell about; a display without a bus is worth a warning.
            if display { logger.warning(line) } else { logger.info(line) }
        }
        bus.use(connected: { [unowned self] in try self.connected($0) }, disconnected: { [unowned self] in self.handle(.disconnected) })
        bus.loop.whenDue(in: { [unowned self] in self.askAgainAt.map(Self.milliseconds(until:)) }) { [unowned self] in
            self.askAgainAt = nil
            self.handle(.askAgain)
        }
        bus.loop.whenDue(in: { [unowned self] in self.retryFullAt.map(Self.milliseconds(until:)) }) { [unowned self] in
            self.retryFullAt = nil
            self.handle(.retryFull)
        }
    }

    func show(_ popup: Popup) { handle(.show(popup)) }

    func withdraw(_ key: Popup.Key) { handle(.withdraw(key)) }

    func adopt(_ key: Popup.Key, id: UInt32, owner: String) { handle(.adopt(key, id: id, owner: owner)) }

    /// For health: whether the desktop is reachable, and which server it uses.
    var health: [String: String] {
        guard enabled else { return ["desktop": "off (NH_AGENT_DESKTOP=0)"] }
        guard bus.address != nil else { return ["desktop": "no session bus"] }
        guard connection != nil else { return ["desktop": "unreachable: \(bus.unreachable ?? "connecting")"] }
        guard let server = core.server else {
            let state = core.retryDelay > 0 ? "the notification server has not answered yet; asking again" : "no notification server"
            return ["desktop": state, "desktopPending": String(core.pending)]
        }
        let wait = core.oldestWait(now: Date())
        return [
            "desktop": wait > 2 ? "the notification server has not answered for \(Int(wait)) s" : "ready",
            "desktopServer": server.summary, "desktopCapabilities": server.capabilities.joined(separator: ","),
            "desktopPopups": String(core.shownCount), "desktopPending": String(core.pending),
        ]
    }

    // MARK: The connection

    /// A new connection: follow the server's name and its signals, then ask who it is.
    private func connected(_ connection: DBusConnection) throws {
        try connection.addMatch(
            "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',interface='org.freedesktop.DBus',"
                + "member='NameOwnerChanged',arg0='\(Self.service)'"
        ) { [unowned self] message in
            guard message.arguments.count == 3, let owner = message.arguments[2].string else { return }
            self.handle(.ownerChanged(owner.isEmpty ? nil : owner))
        }
        try connection.addMatch("type='signal',path='\(Self.path)',interface='\(Self.service)'") { [unowned self] message in
            self.signal(message)
        }
        handle(.connected)
    }

    private func signal(_ message: DBusMessage) {
        let arguments = message.arguments
        switch message.member {
        case "NotificationClosed":
            guard arguments.count >= 2, let id = arguments[0].uint32, let reason = arguments[1].uint32 else { return }
            handle(.closed(id: id, reason: reason, sender: message.sender))
        case "ActionInvoked":
            guard arguments.count >= 2, let id = arguments[0].uint32, let action = arguments[1].string else { return }
            handle(.actionInvoked(id: id, action: action, sender: message.sender))
        default:
            break
        }
    }

    // MARK: Carrying out the core's actions

    private func handle(_ event: DesktopCore.Event) {
        perform(core.on(event, now: Date()))
    }

    private func perform(_ actions: [DesktopCore.Action]) {
        for action in actions {
            switch action {
            case .askServer:
                askServer()
            case .askServerAfter(let seconds):
                askAgainAt = .now + .milliseconds(Int(seconds * 1000))
            case .retryFullAfter(let seconds):
                retryFullAt = .now + .milliseconds(Int(seconds * 1000))
            case .notify(let token, let popup, let replaces, let offered, let timeout):
                notify(token: token, popup, replaces: replaces, actions: offered, timeout: timeout)
            case .close(let id):
                // To the server instance the id belongs to: if it has gone, nothing else is closed.
                guard let owner = core.server?.owner else { break }
                call("CloseNotification", [.uint32(id)], to: owner, timeout: .seconds(10)) { _ in }
            case .userAction(let id, let userAction):
                onUserAction(id, userAction)
            case .shown(.user(let id), let popupId, let owner):
                onPopup(id, popupId, owner)
            case .gone(.user(let id), let owner):
                onPopup(id, nil, owner)
            case .shown, .gone:
                break
            case .expire(let id, let popup):
                guard let owner = core.server?.owner else { break }
                call("Notify", Self.arguments(popup, replaces: id, actions: [], timeout: 1, server: core.server), to: owner,
                     timeout: .seconds(10)) { _ in }
            case .reshow(let owner):
                onReshow(owner)
                handle(.resume)
            case .log(let line, let warning):
                if warning { logger.warning(line) } else { logger.notice(line) }
            }
        }
    }

    private func askServer() {
        var information: DBusMessage?
        var capabilities: [String]?
        var failure: DBusError?
        var answers = 0
        let done = { [unowned self] in
            answers += 1
            guard answers == 2 else { return }
            if let information, let capabilities {
                let fields = information.arguments.compactMap(\.string)
                self.handle(.server(DesktopServer(
                    owner: information.sender, name: fields.first ?? "", vendor: fields.count > 1 ? fields[1] : "",
                    version: fields.count > 2 ? fields[2] : "", capabilities: capabilities)))
            } else if let failure, !failure.isNoPeer {
                // The name has an owner that does not answer as a server yet.
                self.handle(.serverNotReady("\(failure)"))
            } else {
                self.handle(.serverAbsent)
            }
        }
        call("GetServerInformation", timeout: .seconds(10)) { result in
            switch result {
            case .success(let message): information = message
            case .failure(let error): failure = error
            }
            done()
        }
        call("GetCapabilities", timeout: .seconds(10)) { result in
            switch result {
            case .success(let message): capabilities = message.arguments.first?.strings ?? []
            case .failure(let error): failure = failure ?? error
            }
            done()
        }
    }

    private func notify(token: Int, _ popup: Popup, replaces: UInt32, actions: [String], timeout: Int32) {
        // To the server instance the popup's ids belong to, never to whichever owns the name next.
        guard let server = core.server else {
            handle(.notified(token: token, .failure(.noServer)))
            return
        }
        call("Notify", Self.arguments(popup, replaces: replaces, actions: actions, timeout: timeout, server: server), to: server.owner, timeout: Self.notifyTimeout) { [unowned self] result in
            // A connection that is closing answers every call with an error: those popups stay on
            // their way, and the disconnect puts them back in the queue for the next connection.
            guard self.connection?.isOpen == true else { return }
            switch result {
            case .success(let message):
                if let id = message.arguments.first?.uint32 {
                    self.handle(.notified(token: token, .success(id)))
                } else {
                    self.handle(.notified(token: token, .failure(.failed("an answer without an id"))))
                }
            case .failure(let error):
                // No server now, or it left while the call waited: the popup waits for the next one.
                let failure: DesktopCore.NotifyFailure =
                    error.isNoPeer || error.isPeerGone ? .noServer : error.name == Self.fullError ? .full : .failed("\(error)")
                self.handle(.notified(token: token, .failure(failure)))
            }
        }
    }

    /// A Notify call's arguments for `popup` on `server`.
    static func arguments(_ popup: Popup, replaces: UInt32, actions: [String], timeout: Int32, server: DesktopServer?) -> [DBusValue] {
        // A server that reads markup in the body gets it escaped, so "a < b" and "Tom & Jerry" show as written.
        let body = server?.capabilities.contains("body-markup") == true ? escapeMarkup(popup.body) : popup.body
        var hints: [(String, DBusValue)] = [
            ("urgency", .byte(popup.urgency)), ("category", .string(popup.category)), ("desktop-entry", .string(appName)),
        ]
        if let icon = popup.icon { hints.append(("image-path", .string(icon))) }
        if server?.keepsClosedBubbles == true { hints.append(("transient", .boolean(true))) }
        return [
            .string(appName), .uint32(replaces), .string(popup.icon ?? appIcon), .string(popup.title), .string(body),
            .strings(actions), .stringVariants(hints), .int32(timeout),
        ]
    }

    /// Calls the notification server: `to` a unique name (an instance), or the well-known name.
    private func call(
        _ member: String, _ arguments: [DBusValue] = [], to destination: String = service, timeout: Duration,
        reply: @escaping (Result<DBusMessage, DBusError>) -> Void
    ) {
        guard let connection else {
            reply(.failure(DBusError(name: "local.closed", message: "no session bus connection")))
            return
        }
        do {
            try connection.call(
                destination: destination, path: Self.path, interface: Self.service, member: member, arguments, timeout: timeout,
                reply: reply)
        } catch {
            // A connection that is closing: the disconnect that follows deals with what was on its way.
            if !connection.isOpen { return }
            reply(.failure(error))
        }
    }

    /// Milliseconds from now until `deadline`, 0 once it has passed: what the loop's `whenDue` asks.
    static func milliseconds(until deadline: ContinuousClock.Instant) -> Int {
        max(0, Int((ContinuousClock.now.duration(to: deadline) / .milliseconds(1)).rounded(.up)))
    }

    /// The body with `&`, `<` and `>` escaped, for a server with the `body-markup` capability.
    static func escapeMarkup(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }
}
