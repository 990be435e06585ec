import Foundation
import HubProtocol

/// A popup for the desktop's notification server (org.freedesktop.Notifications).
struct Popup: Equatable {
    /// What the popup shows: one of the user's notifications, or a broadcast delivery.
    enum Key: Hashable {
        case user(String)
        case delivery(String)
        /// The popup that stands for a burst's popups (`BurstGrouping`), numbered.
        case summary(Int)
    }

    var key: Key
    var title: String
    var body: String
    /// A local image file shown as the popup's icon, such as a rich payload's picture.
    var icon: String?
    /// 0 low, 1 normal, 2 critical, as the specification's `urgency` hint.
    var urgency: UInt8
    /// When the notification ends: past it, the popup is not shown.
    var expiresAt: Date
    /// The `category` hint.
    var category: String
    /// Offer the default action and Dismiss and Snooze buttons, where the server has actions.
    var offersActions: Bool

    /// The urgency for a notification's priority: low, normal or high.
    static func urgency(priority: String) -> UInt8 { urgencies[priority] ?? 1 }

    static let urgencies: [String: UInt8] = ["low": 0, "normal": 1, "high": 2]

    /// The expire timeout at `now`: -1, the server's own, as desktops expect (a popup goes after a
    /// few seconds and the notification stays in the desktop's history and the hub's; counting down
    /// to an expiry a day away kept popups on screen that long); nil once the notification has
    /// ended, so it is not shown.
    func timeout(now: Date) -> Int32? {
        expiresAt > now ? -1 : nil
    }
}

/// The desktop's notification server as the agent knows it.
struct DesktopServer: Equatable {
    /// The server's unique bus name: popup ids mean something only to this one instance.
    var owner: String
    var name = ""
    var vendor = ""
    var version = ""
    var capabilities: [String] = []

    var hasActions: Bool { capabilities.contains("actions") }
    var summary: String { "\(name) \(version) (\(vendor))" }

    /// notification-daemon (GNOME's): `CloseNotification` takes a popup off its list but leaves the
    /// bubble on screen until the bubble's own timer, and shows nothing else meanwhile; and it keeps
    /// popups that timed out until they are closed, refusing more past 20. Its popups carry the
    /// `transient` hint, so one that times out leaves its list, and the agent withdraws one by
    /// replacing it with one that expires at once.
    var keepsClosedBubbles: Bool { name == "Notification Daemon" && vendor == "GNOME" }
    /// mate-notification-daemon (1.26, Debian 12's) reports the person's × as an expiry (reason 1).
    /// Its popups are sent with its own default timeout, 7 s, asked for explicitly, so that a
    /// reason 1 well before it can only be the ×, and is taken as the person's close.
    var reportsCloseAsExpiry: Bool { vendor == "MATE" }
    static let mateTimeout: Int32 = 7_000
}

/// The agent's popups with no IO: which are shown under which id, which wait for the server,
/// and what a close or a click on one means. `DesktopNotifications` feeds it what happens on the
/// session bus and carries out its actions, in order.
///
/// Popup ids belong to one server instance: when the server's owner changes they are forgotten,
/// and only popups this agent opened on the current server are ever closed or replaced.
struct DesktopCore {
    /// How bursts are grouped; nil: every popup is shown on its own.
    let grouping: BurstGrouping?

    init(grouping: BurstGrouping? = BurstGrouping()) {
        self.grouping = grouping
    }

    /// Notify calls awaiting their answer at once; more wait here, so a hung server holds only memory.
    static let window = 32
    /// Popups waiting for the server at most; the oldest go first.
    static let queueLimit = 500
    /// Action keys offered with a user's notification, their labels, and the state each sets.
    static let actions: [(key: String, label: String, state: AgentUserAction.Action)] = [
        ("default", "Open", .activate), ("dismiss", "Dismiss", .dismiss), ("snooze", "Snooze", .snooze),
    ]

    enum Event: Equatable {
        /// The session bus connection is up (again).
        case connected
        case disconnected
        /// The server answered GetServerInformation and GetCapabilities.
        case server(DesktopServer)
        /// No server owns org.freedesktop.Notifications, and none could be started.
        case serverAbsent
        /// The name has an owner that did not answer as a server (GNOME Shell's helper takes the
        /// name before it exports its object): asked again, with backoff, while that lasts.
        case serverNotReady(String)
        /// The time to ask again has come.
        case askAgain
        /// The time to try a server that was full again has come.
        case retryFull
        /// NameOwnerChanged for org.freedesktop.Notifications; nil when it went away.
        case ownerChanged(String?)
        case show(Popup)
        case withdraw(Popup.Key)
        /// A popup id this agent was given on the server `owner`, as kept across its restart.
        case adopt(Popup.Key, id: UInt32, owner: String)
        /// Sends what waits: after a reshow has adopted and queued what is current.
        case resume
        case notified(token: Int, Result<UInt32, NotifyFailure>)
        case closed(id: UInt32, reason: UInt32, sender: String)
        case actionInvoked(id: UInt32, action: String, sender: String)
    }

    enum NotifyFailure: Error, Equatable {
        /// No server is there to show it.
        case noServer
        /// The server shows as many as it will (notification-daemon's and MATE's 20): shown when
        /// one closes, or in `fullRetry` seconds.
        case full
        /// The server did not answer in time, or refused.
        case failed(String)
    }

    enum Action: Equatable {
        /// Ask the server for its information and capabilities (starting it if it is activatable).
        case askServer
        /// Ask again after this many seconds, unless a server answers or the name changes owner first.
        case askServerAfter(TimeInterval)
        /// Send what waits again after this many seconds (a full server), unless a popup closes first.
        case retryFullAfter(TimeInterval)
        case notify(token: Int, Popup, replaces: UInt32, actions: [String], timeout: Int32)
        case close(UInt32)
        /// What the person did to a user's notification's popup.
        case userAction(String, AgentUserAction.Action)
        /// The popup is up with this id on this server; for a user's notification, kept.
        case shown(Popup.Key, id: UInt32, owner: String)
        /// The popup is gone from this server (closed, expired, withdrawn).
        case gone(Popup.Key, owner: String)
        /// Withdraw a popup from a server that leaves closed bubbles on screen: replace it with a
        /// `transient` one that expires at once.
        case expire(UInt32, Popup)
        /// A server (new, or the first since the agent started) is ready: show again what is current.
        case reshow(owner: String)
        case log(String, warning: Bool)
    }

    private(set) var server: DesktopServer?
    private(set) var connected = false
    /// Asked, not yet answered.
    private var asking = false
    private var popups: [Popup.Key: UInt32] = [:]
    private var keys: [UInt32: Popup.Key] = [:]
    /// What each popup up shows, and since when (its last Notify's answer): for the servers'
    /// quirks (`DesktopServer`).
    private var shown: [UInt32: (popup: Popup, at: Date)] = [:]
    /// Notify calls awaiting their answer, by token: the server generation they went to, and when.
    private var inFlight: [Int: (popup: Popup, generation: Int, sentAt: Date)] = [:]
    /// Moves on whenever the server is forgotten: answers from an earlier one are not kept.
    private var generation = 0
    private var announcedAbsent = false
    /// The wait before asking a server that did not answer again: 0.25 s, doubling to 5 s.
    private(set) var retryDelay: TimeInterval = 0
    static let firstRetry: TimeInterval = 0.25
    static let lastRetry: TimeInterval = 5
    /// Whether the server refused a popup for having too many: nothing more is sent until one closes
    /// or `fullRetry` has passed.
    private(set) var full = false
    static let fullRetry: TimeInterval = 5
    /// What to do once a key's call in flight answers: its newer content, or withdraw it.
    private var after: [Popup.Key: Popup?] = [:]
    private(set) var queue: [Popup] = []
    /// Popups whose action was invoked: the close that follows is not a dismissal.
    private var acted: Set<UInt32> = []
    private var nextToken = 1
    private var dropped = 0
    /// When new popups were last shown on their own, within the grouping's window.
    private var recentShows: [Date] = []
    /// The bursts whose summary is wanted or up, by number: the popups each stands for.
    private var groups: [Int: [Popup]] = [:]
    /// The burst being grouped now, and when its last popup came.
    private var burst: (number: Int, lastAt: Date)?
    private var burstCount = 0

    var shownCount: Int { popups.count }
    var pending: Int { queue.count + inFlight.count }

    /// How long the oldest Notify has waited for its answer.
    func oldestWait(now: Date) -> TimeInterval { inFlight.values.map(\.sentAt).min().map { now.timeIntervalSince($0) } ?? 0 }

    func id(of key: Popup.Key) -> UInt32? { popups[key] }

    mutating func on(_ event: Event, now: Date) -> [Action] {
        switch event {
        case .connected:
            connected = true
            asking = true
            return [.askServer]
        case .disconnected:
            connected = false
            asking = false
            // Calls in flight get no answer now; their popups wait for the next server.
            requeueInFlight()
            forgetServer()
            return []
        case .server(let server):
            asking = false
            retryDelay = 0
            guard self.server?.owner != server.owner else { return flush(now: now) }
            forgetServer()
            self.server = server
            announcedAbsent = false
            // The reshow adopts kept ids before anything waiting is sent, so that a popup still up
            // is replaced rather than shown twice; `resume` sends.
            return [
                .log("notification server: \(server.summary), capabilities \(server.capabilities.joined(separator: ","))", warning: false),
                .reshow(owner: server.owner),
            ]
        case .resume:
            return flush(now: now)
        case .serverAbsent:
            asking = false
            retryDelay = 0
            forgetServer()
            if announcedAbsent { return [] }
            announcedAbsent = true
            return [.log("no notification server on the session bus; popups wait for one", warning: true)]
        case .serverNotReady(let reason):
            asking = false
            forgetServer()
            let first = retryDelay == 0
            retryDelay = first ? Self.firstRetry : min(retryDelay * 2, Self.lastRetry)
            let retry = Action.askServerAfter(retryDelay)
            return first ? [.log("the notification server did not answer (\(reason)); asking again while it is there", warning: true), retry] : [retry]
        case .askAgain:
            guard connected, server == nil, !asking, retryDelay > 0 else { return [] }
            asking = true
            return [.askServer]
        case .ownerChanged(let owner):
            guard connected else { return [] }
            retryDelay = 0
            if owner == nil {
                guard server != nil else { return [] }
                announcedAbsent = true
                forgetServer()
                return [.log("the notification server left the session bus; popups wait for the next", warning: true)]
            }
            if owner == server?.owner { return [] }
            forgetServer()
            asking = true
            return [.askServer]
        case .show(let popup):
            if let grouped = group(popup, now: now) { return grouped }
            // Merged only with a call to the current server; one to a server that has gone is left
            // to its answer.
            if let token = inFlightToken(popup.key, currentOnly: true) {
                // The same content on its way already needs nothing more.
                if inFlight[token]?.popup == popup {
                    after.removeValue(forKey: popup.key)
                } else {
                    after[popup.key] = .some(popup)
                }
                return []
            }
            queue.removeAll { $0.key == popup.key }
            queue.append(popup)
            if queue.count > Self.queueLimit {
                queue.removeFirst(queue.count - Self.queueLimit)
                dropped += 1
            }
            return flush(now: now)
        case .withdraw(let key):
            if let number = groups.first(where: { $0.value.contains { $0.key == key } })?.key {
                groups[number]?.removeAll { $0.key == key }
                return showSummary(number, now: now)
            }
            queue.removeAll { $0.key == key }
            if inFlightToken(key) != nil {
                after[key] = .some(.none)
                return []
            }
            guard let id = popups.removeValue(forKey: key), let server else { return [] }
            keys[id] = nil
            acted.remove(id)
            let content = shown.removeValue(forKey: id)?.popup
            if server.keepsClosedBubbles, let content { return [.expire(id, content), .gone(key, owner: server.owner)] }
            return [.close(id), .gone(key, owner: server.owner)]
        case .adopt(let key, let id, let owner):
            guard let server, server.owner == owner, popups[key] == nil, keys[id] == nil else { return [] }
            popups[key] = id
            keys[id] = key
            return []
        case .notified(let token, let result):
            guard let (popup, sentTo, _) = inFlight.removeValue(forKey: token) else { return [] }
            let next = after.removeValue(forKey: popup.key)
            var actions: [Action] = []
            switch result {
            case .success(let id):
                // An answer from a server that has since gone means nothing now: the popup (or its
                // newer content) goes to the current one, unless it was withdrawn or is on its way.
                guard let server, sentTo == generation else {
                    if pendingNow(popup.key) { return flush(now: now) }
                    switch next {
                    case .some(.some(let newer)): return on(.show(newer), now: now)
                    case .some(.none): return flush(now: now)
                    case .none: return on(.show(popup), now: now)
                    }
                }
                if let previous = popups[popup.key], previous != id {
                    keys[previous] = nil
                    shown[previous] = nil
                }
                popups[popup.key] = id
                keys[id] = popup.key
                shown[id] = (popup, now)
                actions.append(.shown(popup.key, id: id, owner: server.owner))
            case .failure(.noServer):
                // The popup (or its newer content) waits for a server; asking again finds out when
                // one is there.
                requeue(popup, next: next)
                actions += on(.serverAbsent, now: now)
                return actions
            case .failure(.full):
                // Back to the front of the queue, to go when there is room.
                requeue(popup, next: next)
                guard !full else { return [] }
                full = true
                return [
                    .log("the notification server shows as many popups as it will; the rest wait for room", warning: false),
                    .retryFullAfter(Self.fullRetry),
                ]
            case .failure(.failed(let reason)):
                actions.append(.log("the notification server did not show a popup: \(reason)", warning: true))
            }
            switch next {
            case .some(.some(let newer)): actions += on(.show(newer), now: now)
            case .some(.none): actions += on(.withdraw(popup.key), now: now)
            case .none: actions += flush(now: now)
            }
            return actions
        case .retryFull:
            guard full else { return [] }
            full = false
            return flush(now: now)
        case .closed(let id, let reason, let sender):
            // Room on a server that was full, whoever's popup it was.
            var room: [Action] = []
            if full, let server, sender == server.owner {
                full = false
                room = flush(now: now)
            }
            guard let server, sender == server.owner, let key = keys.removeValue(forKey: id) else { return room }
            popups[key] = nil
            let since = shown.removeValue(forKey: id)?.at
            // A summary closed, however: it alone goes; what it stood for stays as it is in the store.
            if case .summary(let number) = key { groups[number] = nil }
            var actions: [Action] = [.gone(key, owner: server.owner)] + room
            // 2: dismissed by the user. 1 (expired), 3 (closed by a call) and 4 (undefined) change
            // nothing, but for MATE's expiry that came too soon to be one.
            let closedByPerson = reason == 2 || (reason == 1 && server.reportsCloseAsExpiry && since.map {
                now.timeIntervalSince($0) < Double(DesktopServer.mateTimeout) / 1000 - Self.mateMargin
            } == true)
            if acted.remove(id) == nil, closedByPerson, case .user(let notification) = key {
                actions.insert(.userAction(notification, .dismiss), at: 0)
            }
            return actions
        case .actionInvoked(let id, let action, let sender):
            guard let server, sender == server.owner, let key = keys[id], case .user(let notification) = key else { return [] }
            guard let userAction = Self.actions.first(where: { $0.key == action })?.state else { return [] }
            acted.insert(id)
            // Closed at once, as the person expects after pressing a button, whatever the server does
            // itself and however long the hub takes to hear of it (the state goes on its way too).
            return [.userAction(notification, userAction), .close(id)]
        }
    }

    /// How much sooner than MATE's timeout a reason 1 must come to be the person's ×: the timer
    /// starts as the server takes the Notify, a little before its answer reaches the agent.
    static let mateMargin: TimeInterval = 0.5

    /// Sends what waits, up to the window, once a server is ready.
    private mutating func flush(now: Date) -> [Action] {
        guard !full else { return [] }
        guard connected, let server else {
            // With no server known, asking starts an activatable one; its answer flushes.
            if connected, !asking, !queue.isEmpty {
                asking = true
                return [.askServer]
            }
            return []
        }
        var actions: [Action] = []
        if dropped > 0 {
            actions.append(.log("\(dropped) popups waited too long for the notification server and were dropped", warning: true))
            dropped = 0
        }
        while inFlight.count < Self.window, !queue.isEmpty {
            let popup = queue.removeFirst()
            guard let timeout = popup.timeout(now: now) else { continue }
            let token = nextToken
            nextToken += 1
            inFlight[token] = (popup, generation, now)
            let offered = popup.offersActions && server.hasActions ? Self.actions.flatMap { [$0.key, $0.label] } : []
            actions.append(.notify(
                token: token, popup, replaces: popups[popup.key] ?? 0, actions: offered,
                timeout: server.reportsCloseAsExpiry ? DesktopServer.mateTimeout : timeout))
        }
        return actions
    }

    /// Forgets the popup ids of the server that was: they mean nothing to the next one.
    /// A popup whose Notify was not taken goes back to the front of the queue (or its newer content
    /// does), unless it was withdrawn meanwhile or is on its way again.
    private mutating func requeue(_ popup: Popup, next: Popup??) {
        guard !pendingNow(popup.key) else { return }
        switch next {
        case .some(.some(let newer)): queue.insert(newer, at: 0)
        case .some(.none): break
        case .none: queue.insert(popup, at: 0)
        }
    }

    /// Groups a new popup that comes in a burst: from the grouping's `limit + 1`th new popup within
    /// its window on, new popups are counted in one summary popup, replaced in place as more come,
    /// until none has come for a window. A replacement of a popup shown, and a critical one, are
    /// shown as ever. Nil when the popup is to be shown on its own.
    private mutating func group(_ popup: Popup, now: Date) -> [Action]? {
        guard let grouping, server != nil else { return nil }
        if case .summary = popup.key { return nil }
        // One counted already: its newer content is counted instead.
        if let number = groups.first(where: { $0.value.contains { $0.key == popup.key } })?.key {
            groups[number] = groups[number]?.map { $0.key == popup.key ? popup : $0 }
            return showSummary(number, now: now)
        }
        guard popups[popup.key] == nil, !pendingNow(popup.key), popup.urgency < 2 else { return nil }
        recentShows.removeAll { now.timeIntervalSince($0) >= grouping.window }
        if let current = burst, now.timeIntervalSince(current.lastAt) < grouping.window, groups[current.number] != nil {
            burst = (current.number, now)
        } else if recentShows.count >= grouping.limit {
            burstCount += 1
            burst = (burstCount, now)
            groups[burstCount] = []
        } else {
            recentShows.append(now)
            return nil
        }
        let number = burst!.number
        groups[number, default: []].append(popup)
        return showSummary(number, now: now)
    }

    /// Shows a burst's summary as it stands, or withdraws it once it stands for nothing current.
    private mutating func showSummary(_ number: Int, now: Date) -> [Action] {
        let members = (groups[number] ?? []).filter { $0.expiresAt > now }
        guard !members.isEmpty, let grouping else {
            groups[number] = nil
            return on(.withdraw(.summary(number)), now: now)
        }
        return on(.show(grouping.summary(number, of: members)), now: now)
    }

    private mutating func forgetServer() {
        server = nil
        groups = [:]
        burst = nil
        recentShows = []
        full = false
        generation += 1
        popups = [:]
        keys = [:]
        shown = [:]
        acted = []
    }

    private mutating func requeueInFlight() {
        let waiting = inFlight.sorted { $0.key < $1.key }.map(\.value.popup)
        for popup in waiting.reversed() {
            let newer = after.removeValue(forKey: popup.key)
            switch newer {
            case .some(.some(let content)): queue.insert(content, at: 0)
            case .some(.none): break
            case .none: queue.insert(popup, at: 0)
            }
        }
        inFlight = [:]
        after = [:]
    }

    /// The call on its way for `key`; `currentOnly`: only one to the current server.
    private func inFlightToken(_ key: Popup.Key, currentOnly: Bool = false) -> Int? {
        inFlight.first { $0.value.popup.key == key && (!currentOnly || $0.value.generation == generation) }?.key
    }

    /// Whether the key waits in the queue, or is on its way to the current server.
    private func pendingNow(_ key: Popup.Key) -> Bool {
        queue.contains { $0.key == key } || inFlightToken(key, currentOnly: true) != nil
    }
}

/// How a burst of popups is grouped, as desktops and phones group them: the first `limit` new
/// popups within `window` seconds are shown on their own; the next, and every one that follows
/// less than `window` after the one before, are counted in one summary popup ("12 new
/// notifications", the latest titles below), replaced in place as more come. A summary has no
/// buttons; closing it or clicking it closes it alone, and the notifications it stands for stay
/// unread and not dismissed, in `nh-agent list`, the inbox and the history.
struct BurstGrouping: Equatable {
    var limit = 3
    var window: TimeInterval = 10
    /// The latest titles a summary lists.
    static let titles = 3

    /// From `NH_AGENT_POPUP_BURST`: the popups shown on their own before the rest are grouped
    /// (default 3); 0 shows every popup on its own. Nil when it does not parse.
    static func from(environment: [String: String]) -> BurstGrouping?? {
        guard let text = environment["NH_AGENT_POPUP_BURST"] else { return .some(BurstGrouping()) }
        guard let limit = Int(text), limit >= 0 else { return nil }
        return .some(limit == 0 ? nil : BurstGrouping(limit: limit))
    }

    /// The summary popup for a burst's popups, oldest first.
    func summary(_ number: Int, of members: [Popup]) -> Popup {
        let latest = members.suffix(Self.titles).reversed().map(\.title)
        var body = latest.joined(separator: "\n")
        if members.count > latest.count { body += "\n…" }
        return Popup(
            key: .summary(number), title: members.count == 1 ? "1 new notification" : "\(members.count) new notifications", body: body,
            icon: nil, urgency: members.map(\.urgency).max() ?? 1, expiresAt: members.map(\.expiresAt).max() ?? .distantPast,
            category: "x-nh.summary", offersActions: false)
    }
}

extension Popup {
    /// A user's notification's popup, with Open, Dismiss and Snooze; nil for one with nothing to show.
    init?(user notification: UserNotification) {
        // Encrypted content this device cannot read is shown as such, never as its record.
        let shown = notification.visual ?? (notification.encrypted == nil ? nil : Self.encryptedContent)
        guard let visual = shown else { return nil }
        self.init(
            key: .user(notification.id), title: visual.title, body: visual.body, icon: nil,
            urgency: Popup.urgency(priority: notification.priority), expiresAt: notification.expiresAt,
            category: "x-nh.user", offersActions: true)
    }

    /// A broadcast delivery's popup: its payload's title and message (or body, or alert), or a rich
    /// notification's type and message with its picture. It has no state to act on, so no buttons.
    init(delivery: AgentDelivery, payload: JSONValue, richPath: String?) {
        var title = payload["title"]?.stringValue ?? "Notification"
        let text = payload["message"] ?? payload["body"] ?? payload["alert"] ?? payload["aps"]?["alert"]
        var body = text.map(\.plainText) ?? payload.stringValue ?? ""
        var icon: String?
        if let rich = delivery.rich {
            title = rich.richType.capitalized
            body = rich.message
            icon = rich.contentType.hasPrefix("image/") ? richPath : nil
        }
        self.init(
            key: .delivery(delivery.deliveryId), title: title, body: body, icon: icon,
            urgency: Popup.urgency(priority: payload["priority"]?.stringValue ?? "normal"), expiresAt: delivery.expiresAt,
            category: "x-nh.broadcast", offersActions: false)
    }

    /// What a change to a user's notification does to its popup.
    enum Change: Equatable {
        case show(Popup)
        case withdraw
        case none
    }

    /// What a popup shows of a notification encrypted end to end that this device cannot read.
    static let encryptedContent = VisualContent(title: "Encrypted notification", body: "This device does not hold the key to read it.")

    /// Current: unread, neither acted on nor expired, and with something to show.
    static func isCurrent(_ notification: UserNotification, now: Date) -> Bool {
        notification.userActionState == .noInteraction && notification.readState == .unread && notification.expiresAt > now
            && (notification.visual != nil || notification.encrypted != nil)
    }

    /// A created or updated notification: shown when current and new, or changed on screen (a
    /// replacement); withdrawn once acted on anywhere, expired or deleted. Read elsewhere but not
    /// acted on, its popup stays.
    static func change(from previous: UserNotification?, to current: UserNotification?, now: Date) -> Change {
        guard let current else { return .withdraw }
        if isCurrent(current, now: now) {
            guard let previous, isCurrent(previous, now: now) else { return Popup(user: current).map(Change.show) ?? .none }
            let looksSame = previous.visual == current.visual && previous.encrypted == current.encrypted && previous.priority == current.priority
                && previous.expiresAt == current.expiresAt
            return looksSame ? .none : Popup(user: current).map(Change.show) ?? .none
        }
        if current.userActionState != .noInteraction || current.expiresAt <= now { return .withdraw }
        return .none
    }
}
