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
    private(set) var userId: String?
    private var token: UserToken?
    private var tokenFailure = ""
    static let batch = 100

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
    private func call<R: HubRequest>(_ request: R) throws -> R.Reply {
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

    /// Fetches and applies every change since the cursor.
    func syncNow() {
        do {
            for _ in 0..<10_000 {
                let changes: UserChanges
                do {
                    changes = try call(UserChangesRequest(cursor: try cache.cursor, limit: Self.batch))
                } catch let error as HubError where error.code == .expired {
                    logger.notice("the store no longer has changes that old; starting again", ("reason", error.message))
                    show(try cache.reset())
                    continue
                }
                let desktop = try desktopIDs(changes)
                try cache.apply(changes) { events in show(events, desktop: desktop) }
                if !changes.changes.isEmpty {
                    logger.info("sync batch", ("changes", changes.changes.count), ("cursor", changes.cursor))
                }
                if !changes.hasMore { return }
            }
        } catch {
            logger.warning("sync failed; the next signal or timer tries again", ("error", "\(error)"))
        }
    }

    /// Marks a notification read, dismissed, activated or snoozed, or deletes it, for this user everywhere.
    func act(_ id: String, _ action: AgentUserAction.Action) throws {
        switch action {
        case .delete:
            let desktop = try cache.desktopID(id)
            _ = try call(DeleteUserNotification(id: id, device: device))
            if let event = try cache.remove(id) { show([event], desktop: desktop.map { [id: $0] } ?? [:]) }
        default:
            let request: UpdateUserNotificationState
            switch action {
            case .read: request = UpdateUserNotificationState(id: id, readState: .read, device: device)
            case .dismiss: request = UpdateUserNotificationState(id: id, userActionState: .dismissed, device: device)
            case .activate: request = UpdateUserNotificationState(id: id, readState: .read, userActionState: .activated, device: device)
            default: request = UpdateUserNotificationState(id: id, userActionState: .snoozed, device: device)
            }
            let desktop = try cache.desktopID(id)
            let updated = try call(request).notification
            if let event = try cache.store(updated) { show([event], desktop: desktop.map { [id: $0] } ?? [:]) }
        }
    }

    func history() throws -> UserHistory { try call(UserHistoryRequest()) }

    private func desktopIDs(_ changes: UserChanges) throws -> [String: Int] {
        guard output.desktop else { return [:] }
        var ids: [String: Int] = [:]
        for change in changes.changes { if let id = try cache.desktopID(change.id) { ids[change.id] = id } }
        return ids
    }

    private func show(_ events: [UserCache.Event], desktop: [String: Int] = [:]) {
        for event in events {
            switch event {
            case .created(let notification):
                output.userEvent("user.created", notification)
                if notification.userActionState == .noInteraction, let shown = output.showDesktop(notification) {
                    try? cache.setDesktopID(notification.id, shown)
                }
            case .updated(let notification, _):
                output.userEvent("user.updated", notification)
                if notification.userActionState != .noInteraction, let shown = desktop[notification.id] {
                    output.withdrawDesktop(shown)
                }
            case .deleted(let notification):
                output.userEvent("user.deleted", notification)
                if let shown = desktop[notification.id] { output.withdrawDesktop(shown) }
            }
        }
    }
}
