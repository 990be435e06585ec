import Foundation
import HubProtocol
import Testing

@testable import NHAgent

/// The agent's popups with no bus: what is sent, what a close or a click means, and what a new
/// notification server instance forgets.
@Suite("Desktop popups")
struct DesktopCoreTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    static let dunst = DesktopServer(owner: ":1.7", name: "dunst", vendor: "knopwob", version: "1.9.0", capabilities: ["actions", "body"])

    static func popup(_ id: String, title: String = "T", urgency: UInt8 = 1, seconds: TimeInterval = 60) -> Popup {
        Popup(key: .user(id), title: title, body: "B", icon: nil, urgency: urgency, expiresAt: t0.addingTimeInterval(seconds),
              category: "x-nh.user", offersActions: true)
    }

    static let buttons = ["default", "Open", "dismiss", "Dismiss", "snooze", "Snooze"]

    /// A core with a ready server.
    static func ready(_ server: DesktopServer = dunst, grouping: BurstGrouping? = nil) -> DesktopCore {
        var core = DesktopCore(grouping: grouping)
        #expect(core.on(.connected, now: t0) == [.askServer])
        _ = core.on(.server(server), now: t0)
        _ = core.on(.resume, now: t0)
        return core
    }

    /// Shows `popup` and answers its Notify with `id`.
    static func shown(_ core: inout DesktopCore, _ popup: Popup, id: UInt32) {
        let actions = core.on(.show(popup), now: t0)
        guard case .notify(let token, _, _, _, _)? = actions.first else {
            Issue.record("no Notify for \(popup.key): \(actions)")
            return
        }
        #expect(core.on(.notified(token: token, .success(id)), now: t0) == [.shown(popup.key, id: id, owner: core.server!.owner)])
    }

    @Test("a popup waits for the server's answer, then goes with the buttons, urgency and timeout")
    func showAfterServer() {
        var core = DesktopCore(grouping: nil)
        #expect(core.on(.show(Self.popup("a", urgency: 2)), now: Self.t0) == [])
        #expect(core.on(.connected, now: Self.t0) == [.askServer])
        let actions = core.on(.server(Self.dunst), now: Self.t0)
        #expect(actions.last == .reshow(owner: ":1.7"))
        #expect(core.on(.resume, now: Self.t0.addingTimeInterval(10)) == [
            .notify(token: 1, Self.popup("a", urgency: 2), replaces: 0, actions: Self.buttons, timeout: -1)
        ])
    }

    @Test("a server without the actions capability gets no buttons; an ended notification is not shown")
    func noActions() {
        var core = Self.ready(DesktopServer(owner: ":1.9", capabilities: ["body"]))
        #expect(core.on(.show(Self.popup("a")), now: Self.t0) == [
            .notify(token: 1, Self.popup("a"), replaces: 0, actions: [], timeout: -1)
        ])
        #expect(core.on(.show(Self.popup("b", seconds: -1)), now: Self.t0) == [])
        #expect(Self.popup("c", seconds: 1e9).timeout(now: Self.t0) == -1)
    }

    @Test("close by the person dismisses; expiry and a close by call change nothing; the default action activates")
    func closeReasons() {
        var core = Self.ready()
        Self.shown(&core, Self.popup("a"), id: 10)
        Self.shown(&core, Self.popup("b"), id: 11)
        Self.shown(&core, Self.popup("c"), id: 12)
        Self.shown(&core, Self.popup("d"), id: 13)
        #expect(core.on(.closed(id: 10, reason: 2, sender: ":1.7"), now: Self.t0) == [.userAction("a", .dismiss), .gone(.user("a"), owner: ":1.7")])
        #expect(core.on(.closed(id: 11, reason: 1, sender: ":1.7"), now: Self.t0) == [.gone(.user("b"), owner: ":1.7")])
        #expect(core.on(.closed(id: 12, reason: 3, sender: ":1.7"), now: Self.t0) == [.gone(.user("c"), owner: ":1.7")])
        // An action closes the popup at once, without waiting for the hub; then the close the
        // server sends after it changes nothing: only the action counts.
        #expect(core.on(.actionInvoked(id: 13, action: "default", sender: ":1.7"), now: Self.t0) == [.userAction("d", .activate), .close(13)])
        #expect(core.on(.closed(id: 13, reason: 2, sender: ":1.7"), now: Self.t0) == [.gone(.user("d"), owner: ":1.7")])
        // A signal for an id it does not know, or from another sender, is ignored.
        #expect(core.on(.closed(id: 99, reason: 2, sender: ":1.7"), now: Self.t0) == [])
        Self.shown(&core, Self.popup("e"), id: 14)
        #expect(core.on(.closed(id: 14, reason: 2, sender: ":1.99"), now: Self.t0) == [])
        #expect(core.on(.actionInvoked(id: 14, action: "snooze", sender: ":1.7"), now: Self.t0) == [.userAction("e", .snooze), .close(14)])
        Self.shown(&core, Self.popup("f"), id: 15)
        #expect(core.on(.actionInvoked(id: 15, action: "dismiss", sender: ":1.7"), now: Self.t0) == [.userAction("f", .dismiss), .close(15)])
        #expect(core.on(.closed(id: 15, reason: 3, sender: ":1.7"), now: Self.t0) == [.gone(.user("f"), owner: ":1.7")])
        Self.shown(&core, Self.popup("g"), id: 16)
        #expect(core.on(.actionInvoked(id: 16, action: "unknown", sender: ":1.7"), now: Self.t0) == [])
    }

    @Test("a broadcast's popup never becomes a user action")
    func broadcastPopups() {
        var core = Self.ready()
        var broadcast = Self.popup("x")
        broadcast.key = .delivery("d1")
        Self.shown(&core, broadcast, id: 20)
        #expect(core.on(.actionInvoked(id: 20, action: "default", sender: ":1.7"), now: Self.t0) == [])
        #expect(core.on(.closed(id: 20, reason: 2, sender: ":1.7"), now: Self.t0) == [.gone(.delivery("d1"), owner: ":1.7")])
    }

    @Test("a replacement replaces the popup in place; withdrawing closes it once")
    func replaceAndWithdraw() {
        var core = Self.ready()
        Self.shown(&core, Self.popup("a"), id: 10)
        let newer = Self.popup("a", title: "Newer")
        #expect(core.on(.show(newer), now: Self.t0) == [.notify(token: 2, newer, replaces: 10, actions: Self.buttons, timeout: -1)])
        #expect(core.on(.notified(token: 2, .success(10)), now: Self.t0) == [.shown(.user("a"), id: 10, owner: ":1.7")])
        #expect(core.on(.withdraw(.user("a")), now: Self.t0) == [.close(10), .gone(.user("a"), owner: ":1.7")])
        #expect(core.on(.withdraw(.user("a")), now: Self.t0) == [])
        // The close that the withdrawal causes is not the person's.
        #expect(core.on(.closed(id: 10, reason: 3, sender: ":1.7"), now: Self.t0) == [])
    }

    @Test("a change while the Notify is on its way follows its answer; the same content is not sent twice")
    func changeInFlight() {
        var core = Self.ready()
        #expect(core.on(.show(Self.popup("a")), now: Self.t0).count == 1)
        #expect(core.on(.show(Self.popup("a")), now: Self.t0) == [])
        #expect(core.on(.notified(token: 1, .success(5)), now: Self.t0) == [.shown(.user("a"), id: 5, owner: ":1.7")])
        #expect(core.on(.show(Self.popup("b")), now: Self.t0).count == 1)
        #expect(core.on(.withdraw(.user("b")), now: Self.t0) == [])
        #expect(core.on(.notified(token: 2, .success(6)), now: Self.t0) == [
            .shown(.user("b"), id: 6, owner: ":1.7"), .close(6), .gone(.user("b"), owner: ":1.7"),
        ])
        #expect(core.on(.show(Self.popup("c")), now: Self.t0).count == 1)
        let newer = Self.popup("c", title: "Newer")
        #expect(core.on(.show(newer), now: Self.t0) == [])
        #expect(core.on(.notified(token: 3, .success(7)), now: Self.t0) == [
            .shown(.user("c"), id: 7, owner: ":1.7"), .notify(token: 4, newer, replaces: 7, actions: Self.buttons, timeout: -1),
        ])
    }

    @Test("a burst: the first three in 10 s shown on their own, the rest counted in one summary replaced in place; its close records nothing")
    func burstGrouping() {
        var core = Self.ready(grouping: BurstGrouping())
        for (i, id) in ["a", "b", "c"].enumerated() { Self.shown(&core, Self.popup(id, title: id.uppercased()), id: UInt32(10 + i)) }
        let grouping = BurstGrouping()
        // The fourth within the window: the summary stands for it.
        let first = grouping.summary(1, of: [Self.popup("d", title: "D")])
        #expect(first.title == "1 new notification" && first.body == "D" && !first.offersActions)
        #expect(core.on(.show(Self.popup("d", title: "D")), now: Self.t0.addingTimeInterval(1)) == [
            .notify(token: 4, first, replaces: 0, actions: [], timeout: -1)
        ])
        // More while its Notify is on its way: only the newest count goes after the answer.
        #expect(core.on(.show(Self.popup("e", title: "E")), now: Self.t0.addingTimeInterval(2)) == [])
        #expect(core.on(.show(Self.popup("f", title: "F")), now: Self.t0.addingTimeInterval(3)) == [])
        let three = grouping.summary(1, of: ["d", "e", "f"].map { Self.popup($0, title: $0.uppercased()) })
        #expect(three.title == "3 new notifications" && three.body == "F\nE\nD")
        #expect(core.on(.notified(token: 4, .success(20)), now: Self.t0.addingTimeInterval(3)) == [
            .shown(.summary(1), id: 20, owner: ":1.7"), .notify(token: 5, three, replaces: 20, actions: [], timeout: -1),
        ])
        _ = core.on(.notified(token: 5, .success(20)), now: Self.t0.addingTimeInterval(3))
        // A replacement of one shown on its own, and a critical one, are shown as ever.
        #expect(core.on(.show(Self.popup("a", title: "A2")), now: Self.t0.addingTimeInterval(4)).first
                == .notify(token: 6, Self.popup("a", title: "A2"), replaces: 10, actions: Self.buttons, timeout: -1))
        #expect(core.on(.show(Self.popup("z", urgency: 2)), now: Self.t0.addingTimeInterval(4)).count == 1)
        // One counted is handled elsewhere: the count goes down; the last one gone withdraws the summary.
        let two = grouping.summary(1, of: ["d", "f"].map { Self.popup($0, title: $0.uppercased()) })
        #expect(core.on(.withdraw(.user("e")), now: Self.t0.addingTimeInterval(5)) == [.notify(token: 8, two, replaces: 20, actions: [], timeout: -1)])
        _ = core.on(.notified(token: 8, .success(20)), now: Self.t0.addingTimeInterval(5))
        // The person closes the summary: it goes, nothing is recorded for what it stood for.
        #expect(core.on(.closed(id: 20, reason: 2, sender: ":1.7"), now: Self.t0.addingTimeInterval(6)) == [.gone(.summary(1), owner: ":1.7")])
        #expect(core.on(.withdraw(.user("d")), now: Self.t0.addingTimeInterval(6)) == [])
        // Still within the burst: a new summary starts.
        #expect(core.on(.show(Self.popup("g", title: "G")), now: Self.t0.addingTimeInterval(7)) == [
            .notify(token: 9, grouping.summary(2, of: [Self.popup("g", title: "G")]), replaces: 0, actions: [], timeout: -1)
        ])
        _ = core.on(.notified(token: 9, .success(21)), now: Self.t0.addingTimeInterval(7))
        // A window after the last: shown on its own again.
        #expect(core.on(.show(Self.popup("h")), now: Self.t0.addingTimeInterval(18)) == [
            .notify(token: 10, Self.popup("h"), replaces: 0, actions: Self.buttons, timeout: -1)
        ])
        #expect(core.on(.withdraw(.user("g")), now: Self.t0.addingTimeInterval(19)) == [.close(21), .gone(.summary(2), owner: ":1.7")])
        // NH_AGENT_POPUP_BURST: a count, 0 for none; anything else is refused.
        #expect(BurstGrouping.from(environment: [:]) == .some(BurstGrouping()))
        #expect(BurstGrouping.from(environment: ["NH_AGENT_POPUP_BURST": "0"]) == .some(nil))
        #expect(BurstGrouping.from(environment: ["NH_AGENT_POPUP_BURST": "5"]) == .some(BurstGrouping(limit: 5)))
        #expect(BurstGrouping.from(environment: ["NH_AGENT_POPUP_BURST": "x"]) == nil)
    }

    @Test("a notification encrypted end to end shows that it is, never its record")
    func encryptedPopup() throws {
        let notification = UserNotification(
            id: "e1", appNotificationId: "a", userId: "u", encrypted: "AAAA", expiresAt: Self.t0.addingTimeInterval(60), createdAt: Self.t0,
            modifiedAt: Self.t0)
        let popup = try #require(Popup(user: notification))
        #expect(popup.title == "Encrypted notification" && !popup.body.contains("AAAA"))
        #expect(Popup.isCurrent(notification, now: Self.t0))
        var replaced = notification
        replaced.encrypted = "BBBB"
        #expect(Popup.change(from: notification, to: replaced, now: Self.t0) == .show(popup))
    }

    @Test("a summary of many lists the latest three titles and says there are more")
    func summaryOfMany() {
        let members = (1...12).map { Self.popup("n\($0)", title: "T\($0)") }
        let summary = BurstGrouping().summary(4, of: members)
        #expect(summary.key == .summary(4) && summary.title == "12 new notifications" && summary.body == "T12\nT11\nT10\n…")
    }

    @Test("notification-daemon: a withdrawn popup is replaced by one that expires at once, since a closed bubble stays on its screen")
    func notificationDaemonWithdraws() {
        let server = DesktopServer(owner: ":1.8", name: "Notification Daemon", vendor: "GNOME", version: "3.20.0", capabilities: ["actions"])
        #expect(server.keepsClosedBubbles && !server.reportsCloseAsExpiry && !Self.dunst.keepsClosedBubbles)
        var core = Self.ready(server)
        Self.shown(&core, Self.popup("a"), id: 10)
        #expect(core.on(.withdraw(.user("a")), now: Self.t0) == [.expire(10, Self.popup("a")), .gone(.user("a"), owner: ":1.8")])
        // The expiry that follows changes nothing.
        #expect(core.on(.closed(id: 10, reason: 1, sender: ":1.8"), now: Self.t0) == [])
        let hints = DesktopNotifications.arguments(Self.popup("b"), replaces: 0, actions: [], timeout: -1, server: server)[6]
        #expect(hints == .stringVariants([
            ("urgency", .byte(1)), ("category", .string("x-nh.user")), ("desktop-entry", .string("nh-agent")), ("transient", .boolean(true)),
        ]))
    }

    @Test("MATE: popups ask for its 7 s; an expiry well before that is the person's ×, one after it is an expiry")
    func mateCloseReportedAsExpiry() {
        let server = DesktopServer(owner: ":1.9", name: "Notification Daemon", vendor: "MATE", version: "1.26.0", capabilities: ["actions"])
        var core = Self.ready(server)
        #expect(core.on(.show(Self.popup("a")), now: Self.t0) == [
            .notify(token: 1, Self.popup("a"), replaces: 0, actions: Self.buttons, timeout: 7_000)
        ])
        _ = core.on(.notified(token: 1, .success(10)), now: Self.t0)
        #expect(core.on(.closed(id: 10, reason: 1, sender: ":1.9"), now: Self.t0.addingTimeInterval(1.5)) == [
            .userAction("a", .dismiss), .gone(.user("a"), owner: ":1.9"),
        ])
        Self.shown(&core, Self.popup("b"), id: 11)
        #expect(core.on(.closed(id: 11, reason: 1, sender: ":1.9"), now: Self.t0.addingTimeInterval(7)) == [.gone(.user("b"), owner: ":1.9")])
        // Elsewhere an expiry is an expiry, however soon.
        var other = Self.ready()
        Self.shown(&other, Self.popup("c"), id: 12)
        #expect(other.on(.closed(id: 12, reason: 1, sender: ":1.7"), now: Self.t0.addingTimeInterval(0.1)) == [.gone(.user("c"), owner: ":1.7")])
    }

    @Test("at most a window of Notify calls wait for answers; the rest wait in order, and a hung server holds only them")
    func window() {
        var core = Self.ready()
        for i in 0..<(DesktopCore.window + 10) {
            let actions = core.on(.show(Self.popup("p\(i)")), now: Self.t0)
            #expect(actions.count == (i < DesktopCore.window ? 1 : 0))
        }
        #expect(core.pending == DesktopCore.window + 10)
        #expect(core.oldestWait(now: Self.t0.addingTimeInterval(30)) == 30)
        let next = core.on(.notified(token: 1, .success(1)), now: Self.t0)
        #expect(next.count == 2)
        #expect(next.last == .notify(token: DesktopCore.window + 1, Self.popup("p\(DesktopCore.window)"), replaces: 0,
                                     actions: Self.buttons, timeout: -1))
    }

    @Test("a new server instance: ids are forgotten, kept ones adopted only for that instance, answers from the old one dropped")
    func newServer() {
        var core = Self.ready()
        Self.shown(&core, Self.popup("a"), id: 10)
        _ = core.on(.show(Self.popup("b")), now: Self.t0)  // token 2, on its way to :1.7
        #expect(core.on(.ownerChanged(nil), now: Self.t0).contains { if case .log = $0 { true } else { false } })
        #expect(core.server == nil)
        // Nothing of the old server is closed or replaced; a popup it answered for waits for the next.
        #expect(core.on(.withdraw(.user("a")), now: Self.t0) == [])
        #expect(core.on(.notified(token: 2, .success(11)), now: Self.t0) == [.askServer])
        #expect(core.id(of: .user("b")) == nil && core.pending == 1)
        #expect(core.on(.closed(id: 10, reason: 2, sender: ":1.7"), now: Self.t0) == [])
        #expect(core.on(.ownerChanged(":1.8"), now: Self.t0) == [.askServer])
        var next = Self.dunst
        next.owner = ":1.8"
        #expect(core.on(.server(next), now: Self.t0).last == .reshow(owner: ":1.8"))
        // The reshow adopts what this agent opened on this very server, and only that.
        _ = core.on(.adopt(.user("c"), id: 3, owner: ":1.7"), now: Self.t0)
        _ = core.on(.adopt(.user("d"), id: 4, owner: ":1.8"), now: Self.t0)
        #expect(core.on(.resume, now: Self.t0) == [.notify(token: 3, Self.popup("b"), replaces: 0, actions: Self.buttons, timeout: -1)])
        #expect(core.on(.show(Self.popup("c")), now: Self.t0) == [.notify(token: 4, Self.popup("c"), replaces: 0, actions: Self.buttons, timeout: -1)])
        #expect(core.on(.show(Self.popup("d")), now: Self.t0) == [.notify(token: 5, Self.popup("d"), replaces: 4, actions: Self.buttons, timeout: -1)])
    }

    @Test("a call to a server that has gone: its newer content goes to the next server, a withdrawal is kept, and nothing is sent twice")
    func answersAcrossServers() {
        var core = Self.ready()
        _ = core.on(.show(Self.popup("a")), now: Self.t0)  // token 1, to :1.7
        _ = core.on(.show(Self.popup("b")), now: Self.t0)  // token 2, to :1.7
        _ = core.on(.withdraw(.user("b")), now: Self.t0)
        _ = core.on(.ownerChanged(":1.8"), now: Self.t0)
        var next = Self.dunst
        next.owner = ":1.8"
        _ = core.on(.server(next), now: Self.t0)
        // While the old call is unanswered, newer content goes to the new server at once.
        let newer = Self.popup("a", title: "Newer")
        #expect(core.on(.show(newer), now: Self.t0) == [.notify(token: 3, newer, replaces: 0, actions: Self.buttons, timeout: -1)])
        // The old answers: one whose key is on its way already adds nothing; a withdrawn one stays withdrawn.
        #expect(core.on(.notified(token: 1, .success(40)), now: Self.t0) == [])
        #expect(core.on(.notified(token: 2, .success(41)), now: Self.t0) == [])
        #expect(core.pending == 1 && core.id(of: .user("a")) == nil)
    }

    @Test("a Notify that finds no server: the newest content waits, and a withdrawal while it was on its way is kept")
    func noServerWithChanges() {
        var core = Self.ready()
        _ = core.on(.show(Self.popup("a")), now: Self.t0)
        let newer = Self.popup("a", title: "Newer")
        _ = core.on(.show(newer), now: Self.t0)
        _ = core.on(.show(Self.popup("b")), now: Self.t0)
        _ = core.on(.withdraw(.user("b")), now: Self.t0)
        _ = core.on(.notified(token: 1, .failure(.noServer)), now: Self.t0)
        _ = core.on(.notified(token: 2, .failure(.noServer)), now: Self.t0)
        #expect(core.queue.map(\.key) == [.user("a")] && core.queue.first?.title == "Newer")
    }

    @Test("no server: one line, popups wait; a Notify that finds none puts its popup back")
    func absentServer() {
        var core = DesktopCore(grouping: nil)
        _ = core.on(.connected, now: Self.t0)
        let first = core.on(.serverAbsent, now: Self.t0)
        #expect(first.count == 1)
        #expect(core.on(.show(Self.popup("a")), now: Self.t0) == [.askServer], "asking may start an activatable server")
        #expect(core.on(.serverAbsent, now: Self.t0) == [], "said once")
        #expect(core.pending == 1)
        _ = core.on(.server(Self.dunst), now: Self.t0)
        #expect(core.on(.resume, now: Self.t0).count == 1)
        #expect(core.on(.notified(token: 1, .failure(.noServer)), now: Self.t0).count == 1)
        #expect(core.pending == 1 && core.server == nil)
    }

    @Test("a name with an owner that does not answer as a server yet is asked again, 0.25 s doubling to 5 s, until it answers")
    func serverNotReady() {
        var core = DesktopCore(grouping: nil)
        _ = core.on(.connected, now: Self.t0)
        let first = core.on(.serverNotReady("UnknownMethod"), now: Self.t0)
        #expect(first.count == 2 && first.last == .askServerAfter(0.25), "said once, then asked again")
        var delays: [TimeInterval] = []
        for _ in 0..<7 {
            #expect(core.on(.askAgain, now: Self.t0) == [.askServer])
            #expect(core.on(.askAgain, now: Self.t0) == [], "one ask at a time")
            guard case .askServerAfter(let delay)? = core.on(.serverNotReady("UnknownMethod"), now: Self.t0).last else { break }
            delays.append(delay)
        }
        #expect(delays == [0.5, 1, 2, 4, 5, 5, 5])
        #expect(core.on(.askAgain, now: Self.t0) == [.askServer])
        _ = core.on(.server(Self.dunst), now: Self.t0)
        #expect(core.retryDelay == 0 && core.on(.askAgain, now: Self.t0) == [], "a server that answered is not asked again")
        // A new owner starts over.
        _ = core.on(.ownerChanged(nil), now: Self.t0)
        #expect(core.on(.ownerChanged(":1.9"), now: Self.t0) == [.askServer])
        #expect(core.on(.serverNotReady("UnknownMethod"), now: Self.t0).last == .askServerAfter(0.25))
    }

    @Test("a popup a full server refuses waits at the front, and goes when one closes or after the retry; said once")
    func fullServer() {
        var core = Self.ready()
        Self.shown(&core, Self.popup("a"), id: 10)
        guard case .notify(let token, _, _, _, _)? = core.on(.show(Self.popup("b")), now: Self.t0).first else {
            Issue.record("no Notify")
            return
        }
        let refused = core.on(.notified(token: token, .failure(.full)), now: Self.t0)
        #expect(refused.count == 2 && refused.last == .retryFullAfter(DesktopCore.fullRetry) && core.full)
        #expect(core.on(.show(Self.popup("c")), now: Self.t0) == [], "nothing goes while the server is full")
        #expect(core.queue.map(\.key) == [.user("b"), .user("c")])
        // A close (of any popup of that server) makes room: what waits goes, in order.
        let room = core.on(.closed(id: 10, reason: 1, sender: ":1.7"), now: Self.t0)
        let sent: [Popup.Key] = room.compactMap { action in
            guard case .notify(_, let popup, _, _, _) = action else { return nil }
            return popup.key
        }
        #expect(sent == [Popup.Key.user("b"), Popup.Key.user("c")])
        #expect(!core.full)
        // The retry when no close comes.
        var again = Self.ready()
        guard case .notify(let first, _, _, _, _)? = again.on(.show(Self.popup("d")), now: Self.t0).first else { return }
        _ = again.on(.notified(token: first, .failure(.full)), now: Self.t0)
        #expect(again.on(.retryFull, now: Self.t0).count == 1 && !again.full)
        #expect(again.on(.retryFull, now: Self.t0) == [])
    }

    @Test("a lost bus connection puts what was on its way back in the queue, in order")
    func disconnect() {
        var core = Self.ready()
        _ = core.on(.show(Self.popup("a")), now: Self.t0)
        _ = core.on(.show(Self.popup("b")), now: Self.t0)
        _ = core.on(.disconnected, now: Self.t0)
        #expect(core.pending == 2)
        #expect(core.on(.connected, now: Self.t0) == [.askServer])
        _ = core.on(.server(Self.dunst), now: Self.t0)
        let sent = core.on(.resume, now: Self.t0).compactMap { action -> Popup.Key? in
            if case .notify(_, let popup, _, _, _) = action { return popup.key }
            return nil
        }
        #expect(sent == [.user("a"), .user("b")])
    }

    @Test("what a change to a user's notification does to its popup")
    func changes() {
        let now = Self.t0
        let base = UserNotification(
            id: "n", appNotificationId: "app", userId: "u", visual: VisualContent(title: "T", body: "B"), priority: "high",
            expiresAt: now.addingTimeInterval(60), createdAt: now, modifiedAt: now)
        #expect(Popup.change(from: nil, to: base, now: now) == .show(Popup(user: base)!))
        #expect(Popup(user: base)?.urgency == 2)
        #expect(Popup.change(from: base, to: base, now: now) == .none)
        var replaced = base
        replaced.visual = VisualContent(title: "T2", body: "B")
        #expect(Popup.change(from: base, to: replaced, now: now) == .show(Popup(user: replaced)!))
        var read = base
        read.readState = .read
        #expect(Popup.change(from: base, to: read, now: now) == .none, "read elsewhere, the popup stays")
        for state in [UserActionState.dismissed, .activated, .snoozed] {
            var acted = base
            acted.userActionState = state
            #expect(Popup.change(from: base, to: acted, now: now) == .withdraw)
            #expect(Popup.change(from: acted, to: base, now: now) == .show(Popup(user: base)!), "current again")
        }
        #expect(Popup.change(from: base, to: nil, now: now) == .withdraw)
        #expect(Popup.change(from: nil, to: base, now: now.addingTimeInterval(61)) == .withdraw)
        var raw = base
        raw.visual = nil
        #expect(Popup.change(from: nil, to: raw, now: now) == .none)
    }

    @Test("a broadcast's popup: its payload's title and message, or a rich notification's picture")
    func broadcastPopup() {
        let delivery = AgentDelivery(
            deliveryId: "d", notificationId: "n", installationId: "i", payload: "", expiresAt: Self.t0, rich: nil, richTicket: nil)
        let popup = Popup(delivery: delivery, payload: ["title": "Headline", "message": "Markets up", "priority": "high"], richPath: nil)
        #expect(popup.title == "Headline" && popup.body == "Markets up" && popup.urgency == 2 && !popup.offersActions)
        #expect(Popup(delivery: delivery, payload: ["aps": ["alert": "Hi"]], richPath: nil).body == "Hi")
        #expect(Popup(delivery: delivery, payload: "plain", richPath: nil).body == "plain")
        var rich = delivery
        rich.rich = RichReference(richId: "r", richType: "photo", message: "See this", contentType: "image/png", size: 3)
        let picture = Popup(delivery: rich, payload: [:], richPath: "/tmp/p.png")
        #expect(picture.title == "Photo" && picture.body == "See this" && picture.icon == "/tmp/p.png")
    }
}
