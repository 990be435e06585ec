import Bus
import Foundation
import HubProtocol
import ServiceKit

/// The agent's side of per-user notifications: it trades its credential for user tokens, fetches
/// changes since its cursor in batches of at most 100, raises created, updated and deleted events,
/// and sends its own state changes to the store, which signals the user's other devices.
final class AgentUserSync {
    let cache: UserCache
    let credential: String
    let device: String
    let logger: Logger
    let output: AgentOutput
    let client: HubClient
    /// The desktop's popups, for the daemon; nil for one-shot commands.
    var desktop: DesktopNotifications?
    /// The user's keyring on this device, which opens encrypted notifications before they are shown.
    var keys: AgentKeys?
    private(set) var userId: String?
    private var token: UserToken?
    private var tokenFailure = ""
    static let batch = 100
    /// Popups shown again at most when a notification server appears: the newest current ones.
    static let reshowLimit = 50

    init(cache: UserCache, credential: String, device: String, logger: Logger, output: AgentOutput, client: HubClient) {
        self.cache = cache
        self.credential = credential
        self.device = device
        self.logger = logger
        self.output = output
        self.client = client
        client.auth = { nil }
    }

    /// A user token valid for at least another minute, fetched when there is none. Raises the
    /// "access token requested" and "invalidated" events the documents describe.
    func accessToken() -> String? {
        if let token, token.expiresAt.timeIntervalSinceNow > 60 { return token.token }
        output.event("token.requested", ["reason": token == nil ? "none" : "expiring"])
        do {
            let fresh = try client.call(UserTokenRequest(credential: credential))
            token = fresh
            userId = fresh.userId
            tokenFailure = ""
            return fresh.token
        } catch let error as HubError where error.code == .unauthorized {
            token = nil
            output.event("token.invalidated", ["reason": error.message])
            return nil
        } catch {
            if "\(error)" != tokenFailure {
                logger.warning("cannot get a user token; retrying", ("error", "\(error)"))
                tokenFailure = "\(error)"
            }
            return nil
        }
    }

    /// Calls the store with the current user token, getting a fresh one once if it was refused.
    func call<R: HubRequest>(_ request: R) throws -> R.Reply {
        guard let first = accessToken() else { throw HubError(.unauthorized, "no user token") }
        do {
            return try client.call(request, auth: first)
        } catch let error as HubError where error.code == .unauthorized {
            output.event("token.invalidated", ["reason": error.message])
            token = nil
            guard let second = accessToken() else { throw error }
            return try client.call(request, auth: second)
        }
    }

    /// Fetches and applies every change since the cursor. A change this device made before the
    /// fetch began comes back with it; one that does not was lost by the store (it failed over to
    /// a replica that was behind), and the device then syncs in full.
    func syncNow() {
        do {
            let madeHere = try cache.changedHereUnseen
            for _ in 0..<10_000 {
                let changes: UserChanges
                do {
                    changes = try call(UserChangesRequest(cursor: try cache.cursor, limit: Self.batch))
                } catch let error as HubError where error.code == .expired {
                    logger.notice("the store no longer has changes that old; starting again", ("reason", error.message))
                    show(try cache.reset())
                    continue
                } catch let error as HubError where error.code == .historyRewound {
                    // The store failed over and lost changes this device had: the copy becomes the
                    // store's, withdrawing what it lost, and the device goes on from its cursor.
                    try syncInFull(because: error.message)
                    continue
                }
                try cache.apply(changes) { events in show(events) }
                if !changes.changes.isEmpty {
                    logger.info("sync batch", ("changes", changes.changes.count), ("cursor", changes.cursor))
                }
                if !changes.hasMore {
                    let lost = try madeHere.intersection(cache.changedHereUnseen)
                    if !lost.isEmpty {
                        try syncInFull(because: "\(lost.count) changes made on this device are not in the store's history (it failed over and lost them)")
                    }
                    return
                }
            }
        } catch {
            logger.warning("sync failed; the next signal or timer tries again", ("error", "\(error)"))
        }
    }

    /// The copy becomes the store's history, withdrawing what the store no longer holds (popups
    /// too), and the device goes on from the history's cursor.
    private func syncInFull(because reason: String) throws {
        let history = try history()
        let events = try cache.replace(with: history)
        logger.warning(
            "the store's history was rewound; synced in full", ("withdrawn", events.filter { if case .deleted = $0 { true } else { false } }.count),
            ("changed", events.count), ("cursor", history.cursor), ("reason", reason))
        show(events)
    }

    /// Since when the sync store has not taken a queued action; nil while it takes them.
    private var actionsFailingSince: Date?
    /// How long to wait after a failed try before the next, so a sync store that is down costs the
    /// loop one call's timeout now and then, however many popups are closed meanwhile.
    static let actionRetry: TimeInterval = 5

    /// What a person did to a popup: kept in the agent's store at once, then sent in order (now, or
    /// when the sync store answers again), so neither a slow store nor a restart loses it.
    func queueAction(_ id: String, _ action: AgentUserAction.Action, now: Date = Date()) throws {
        try cache.database.run(
            "INSERT INTO pending_actions (id, action, at) VALUES (?, ?, ?)", [id, action.rawValue, now.timeIntervalSince1970])
        sendActionsIfDue(now: now)
    }

    /// Sends what is queued, unless the last try failed less than `actionRetry` ago.
    func sendActionsIfDue(now: Date = Date()) {
        if let since = actionsFailingSince, now.timeIntervalSince(since) < Self.actionRetry { return }
        sendActions(now: now)
    }

    var pendingActions: Int {
        get throws {
            guard let row = try cache.database.queryOne("SELECT count(*) AS n FROM pending_actions") else { return 0 }
            return try row.int("n", of: "pending_actions")
        }
    }

    /// Sends the queued actions in order until one cannot reach the sync store. One the store
    /// refuses for good (the notification was deleted meanwhile) is dropped with a log line.
    func sendActions(now: Date = Date()) {
        do {
            let rows = try cache.database.query("SELECT seq, id, action FROM pending_actions ORDER BY seq LIMIT 100")
            for row in rows {
                let (seq, id) = (try row.int("seq", of: "pending_actions"), try row.string("id", of: "pending_actions"))
                let stored = try row.string("action", of: "pending_actions")
                guard let action = AgentUserAction.Action(rawValue: stored) else {
                    // Left in place it would wait at the head of the queue for good.
                    logger.error("a queued popup action is not one this agent knows; dropped", ("notification", id), ("action", stored))
                    try cache.database.run("DELETE FROM pending_actions WHERE seq = ?", [seq])
                    continue
                }
                do {
                    try act(id, action)
                    logger.info("popup", ("notification", id), ("action", action.rawValue))
                } catch let error as HubError where ![.timeout, .unavailable, .unauthorized].contains(error.code) {
                    logger.warning("the sync store refused what was done to a popup", ("notification", id), ("action", action.rawValue),
                                   ("error", error.message))
                }
                try cache.database.run("DELETE FROM pending_actions WHERE seq = ?", [seq])
            }
            actionsFailingSince = nil
        } catch {
            if actionsFailingSince == nil {
                logger.warning("what was done to popups waits for the sync store", ("error", "\(error)"))
            }
            actionsFailingSince = now
        }
    }

    /// Marks a notification read, dismissed, activated or snoozed, or deletes it, for this user everywhere.
    func act(_ id: String, _ action: AgentUserAction.Action) throws {
        switch action {
        case .delete:
            _ = try call(DeleteUserNotification(id: id, device: device))
            try cache.changedHere(id)
            if let event = try cache.remove(id) { show([event]) }
        default:
            let request: UpdateUserNotificationState
            switch action {
            case .read: request = UpdateUserNotificationState(id: id, readState: .read, device: device)
            case .dismiss: request = UpdateUserNotificationState(id: id, userActionState: .dismissed, device: device)
            case .activate: request = UpdateUserNotificationState(id: id, readState: .read, userActionState: .activated, device: device)
            default: request = UpdateUserNotificationState(id: id, userActionState: .snoozed, device: device)
            }
            let previous = try cache.notification(id)
            let updated = try call(request).notification
            // A change that changed nothing in the store is not numbered, and never comes back.
            if previous.map({ $0.readState != updated.readState || $0.userActionState != updated.userActionState }) ?? true {
                try cache.changedHere(id)
            }
            if let event = try cache.store(updated) { show([event]) }
        }
    }

    func history() throws -> UserHistory { try call(UserHistoryRequest()) }

    /// A notification server is ready (the first since the agent started, or a new one): shows again
    /// the newest current notifications. A popup this agent opened on that very server is replaced
    /// in place (and so answers to this agent again); one closed since, there or on an earlier
    /// server, stays closed until the notification changes.
    func reshow(owner: String) throws {
        guard let desktop else { return }
        let now = Date()
        var popups: [Popup] = []
        // Every kept id is adopted before anything is shown, so that nothing waiting goes out first
        // as a second popup beside one still up.
        let all = try cache.all()
        let current = all.filter { Popup.isCurrent($0, now: now) }.suffix(Self.reshowLimit)
        for notification in current {
            let kept = try cache.popup(notification.id)
            if kept.owner == owner {
                guard let id = kept.id else { continue }
                desktop.adopt(.user(notification.id), id: id, owner: owner)
            } else if kept.owner != nil, kept.id == nil {
                // Closed on an earlier server (expired, or closed by a server that misreports the
                // person's close as an expiry): it stays closed until it changes, as the person left it.
                continue
            }
            if let popup = Popup(user: readable(notification)) { popups.append(popup) }
        }
        // A popup this agent opened on this server that is no longer current (acted on elsewhere
        // while the agent was down, or expired) is withdrawn.
        let shown = Set(current.map(\.id))
        for notification in all where !shown.contains(notification.id) {
            let kept = try cache.popup(notification.id)
            guard kept.owner == owner, let id = kept.id else { continue }
            desktop.adopt(.user(notification.id), id: id, owner: owner)
            desktop.withdraw(.user(notification.id))
        }
        for popup in popups { desktop.show(popup) }
    }

    /// An encrypted notification opened with the device's keyring (as it came when it cannot be).
    func readable(_ notification: UserNotification) -> UserNotification {
        guard notification.encrypted != nil, let keys else { return notification }
        let (readable, failure) = keys.readable(notification) { try call(UserKeyRequest(device: device)) }
        if let failure {
            logger.warning("cannot open an encrypted notification", ("notification", notification.id), ("reason", failure))
        }
        return readable
    }

    private func show(_ events: [UserCache.Event]) {
        let now = Date()
        for event in events {
            switch event {
            case .created(let notification):
                let notification = readable(notification)
                output.userEvent("user.created", notification)
                present(Popup.change(from: nil, to: notification, now: now), notification.id)
            case .updated(let notification, let previous):
                let (notification, previous) = (readable(notification), readable(previous))
                output.userEvent("user.updated", notification)
                present(Popup.change(from: previous, to: notification, now: now), notification.id)
            case .deleted(let notification):
                output.userEvent("user.deleted", notification)
                present(.withdraw, notification.id)
            }
        }
    }

    private func present(_ change: Popup.Change, _ id: String) {
        switch change {
        case .show(let popup): desktop?.show(popup)
        case .withdraw: desktop?.withdraw(.user(id))
        case .none: break
        }
    }
}
