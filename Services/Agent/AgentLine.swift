import Foundation
import HubProtocol

/// The agent's standard-output lines: one JSON object each, with sorted keys, named by `event`.
/// Scripts and hooks read them, so their fields are part of the agent's interface.
enum AgentLine {
    /// A broadcast delivery shown: `{"event": "notification", "deliveryId": …, "payload": …}`.
    /// The payload is given as the JSON it holds, or as a string when it is not JSON.
    struct Notification: Encodable, Equatable {
        var event = "notification"
        var deliveryId: String
        var notificationId: String
        var installationId: String
        var payload: JSONValue
        var receivedAt: Date
        var expiresAt: Date
        var template: String?
        var rich: Rich?

        struct Rich: Encodable, Equatable {
            var richId: String
            var richType: String
            var message: String
            var contentType: String
            var size: Int
            /// The user's key the payload was encrypted for; the file holds it opened.
            var keyId: String?
            /// Where the fetched payload was written, when it was.
            var path: String?
        }

        init(_ delivery: AgentDelivery, payload: JSONValue, receivedAt: Date, richPath: String?) {
            deliveryId = delivery.deliveryId
            notificationId = delivery.notificationId
            installationId = delivery.installationId
            self.payload = payload
            self.receivedAt = receivedAt
            expiresAt = delivery.expiresAt
            template = delivery.template
            rich = delivery.rich.map {
                Rich(richId: $0.richId, richType: $0.richType, message: $0.message, contentType: $0.contentType, size: $0.size, keyId: $0.keyId, path: richPath)
            }
        }
    }

    /// A per-user notification created, updated or deleted, with the notification as it is.
    struct UserEvent: Encodable, Equatable {
        var event: String
        var id: String
        var notification: UserNotification
        var at: Date
    }

    /// A line about the agent itself, such as a token being requested: its own fields beside
    /// `event` and `at`, which win over fields of the same names.
    struct Event: Encodable, Equatable {
        var event: String
        var fields: [String: String]
        var at: Date

        func encode(to encoder: Encoder) throws {
            var object = fields.mapValues(JSONValue.string)
            object["event"] = .string(event)
            object["at"] = .string(WireDate.format(at))
            try JSONValue.object(object).encode(to: encoder)
        }
    }
}
