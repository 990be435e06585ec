import Foundation
import HubProtocol
import ServiceKit

/// nhctl user: enroll a user's devices and post to a user.
enum CtlUser {
    static func run(_ parsed: Arguments, config: HubConfig, environment: [String: String]) -> Int32 {
        let words = Array(parsed.positionals.dropFirst())
        guard words.count == 2 else { return Ctl.fail("usage: nhctl user credential USER | nhctl user post USER --app-id ID …") }
        let user = words[1]
        do {
            let caller = try CtlCaller(parsed, config: config, environment: environment)
            switch words[0] {
            case "credential":
                let sync = try caller.client(config.sync.requests)
                defer { sync.close() }
                let lifetime = try parsed[option: "lifetime"].map { text throws -> Int in
                    guard let value = Int(text) else { throw HubError(.invalidArgument, "--lifetime must be seconds") }
                    return value
                }
                let issued = try sync.call(IssueUserCredential(userId: user, lifetime: lifetime))
                print(parsed.has("json")
                    ? #"{"userId":"\#(issued.userId)","credential":"\#(issued.credential)","expiresAt":"\#(WireDate.format(issued.expiresAt))"}"#
                    : issued.credential)
                return 0
            case "post":
                guard let appId = parsed[option: "app-id"] else { return Ctl.fail("user post needs --app-id, the app's own id for it") }
                var visual: VisualContent?
                if parsed[option: "title"] != nil || parsed[option: "body"] != nil {
                    visual = VisualContent(title: parsed[option: "title"] ?? "", body: parsed[option: "body"] ?? "")
                }
                let expiresAt = try parsed[option: "expires-in"].map { text throws -> Date in
                    guard let seconds = Double(text) else { throw HubError(.invalidArgument, "--expires-in must be seconds") }
                    return Date().addingTimeInterval(seconds)
                }
                let publish = try caller.client(config.publish.requests)
                defer { publish.close() }
                let reply = try publish.call(PostUserNotification(
                    userId: user, appNotificationId: appId, visual: visual, raw: parsed[option: "raw"],
                    priority: parsed[option: "priority"], group: parsed[option: "group"], expiresAt: expiresAt))
                print(parsed.has("json") ? #"{"id":"\#(reply.notification.id)"}"# : "posted \(reply.notification.id) to \(user)")
                return 0
            case "list":
                let sync = try caller.client(config.sync.requests)
                defer { sync.close() }
                let enrolled = try sync.call(IssueUserCredential(userId: user, lifetime: 60))
                let token = try sync.call(UserTokenRequest(credential: enrolled.credential)).token
                let history = try sync.call(UserHistoryRequest(), auth: token)
                let encoder = HubCodec.makeEncoder()
                for notification in history.notifications {
                    if parsed.has("json") {
                        print(String(decoding: try encoder.encode(notification), as: UTF8.self))
                    } else {
                        // An encrypted notification's content is never shown: the hub cannot read it.
                        let title = notification.encrypted != nil
                            ? "(encrypted)" : notification.visual.map { "\($0.title): \($0.body)" } ?? notification.raw ?? ""
                        print("\(notification.id)  \(notification.readState.rawValue)  \(notification.userActionState.rawValue)  \(title)")
                    }
                }
                return 0
            default:
                return Ctl.fail("unknown user command '\(words[0])'; use credential, post or list")
            }
        } catch {
            return CtlSend.report(error)
        }
    }
}
