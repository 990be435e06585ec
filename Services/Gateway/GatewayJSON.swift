import Foundation
import HTTPServer
import HubProtocol

/// The JSON bodies the gateway reads and writes beside Azure's XML, as Codable types: requests are
/// decoded as strictly as the bus decodes its messages (a field of the wrong type or one the type
/// does not have is refused, by name), and responses are encoded with sorted keys and ISO 8601 times.
enum GatewayJSON {
    /// `POST /{hub}/users/tokens`.
    struct TokenRequest: HubMessage {
        static let messageType: MessageType = "rest.users.tokens"
        var credential: String
    }

    /// `POST /{hub}/signatures`: a key, as a connection string names and holds it.
    struct SignatureRequest: HubMessage {
        static let messageType: MessageType = "rest.signatures"
        var keyName: String
        var key: String
    }

    struct Signature: Codable, Equatable {
        var token: String
        var expiresAt: Date
    }

    /// `PATCH /{hub}/users/me/notifications/{id}`.
    struct StateChange: HubMessage {
        static let messageType: MessageType = "rest.users.state"
        var readState: String?
        var userActionState: String?

        /// The states, or the error that lists the ones there are.
        func states() throws -> (ReadState?, UserActionState?) {
            let read = try readState.map { text throws -> ReadState in
                guard let state = ReadState(rawValue: text) else { throw HubError(.invalidArgument, "readState '\(text)' must be unread or read") }
                return state
            }
            let action = try userActionState.map { text throws -> UserActionState in
                guard let state = UserActionState(rawValue: text) else {
                    throw HubError(.invalidArgument, "userActionState '\(text)' must be noInteraction, activated, dismissed or snoozed")
                }
                return state
            }
            return (read, action)
        }
    }

    /// A request body, or the error that names what is wrong with it.
    static func decode<T: HubMessage>(_ type: T.Type, _ body: Data, _ what: String) throws -> T {
        guard JSONValue.parse(body)?.objectValue != nil else {
            throw HubError(.invalidPayload, "the body must be \(what)")
        }
        do {
            return try HubCodec.decodePayload(T.self, from: body)
        } catch {
            // The codec names the body by its internal type; the caller knows it as the body.
            throw HubError(error.code, error.message.replacingOccurrences(of: "'\(T.messageType)'", with: "the body"))
        }
    }

    struct VAPIDKey: Codable, Equatable {
        var publicKey: String
    }

    struct Count: Codable, Equatable {
        var name: String
        var count: Int
    }

    /// A notification's outcome (`GET /{hub}/messages/{id}` with `Accept: application/json`), and in the
    /// list of recent ones, what it targeted.
    struct Outcome: Codable, Equatable {
        var notificationId: String
        var state: String
        var location: String
        var enqueueTime: Date
        var startTime: Date?
        var endTime: Date?
        var targetPlatforms: String
        var outcomeCounts: [Count]
        var platforms: [String: [String: Int]]?
        var format: String?
        var tags: String?
        var installationId: String?
        var userId: String?
        var scheduleTime: Date?

        init(_ outcome: NotificationOutcome, location: String) {
            notificationId = outcome.notificationId
            state = outcome.state.rawValue
            self.location = location
            enqueueTime = outcome.enqueuedAt
            startTime = outcome.startedAt
            endTime = outcome.endedAt
            outcomeCounts = [
                Count(name: "Success", count: outcome.acknowledged), Count(name: "Delivered", count: outcome.delivered),
                Count(name: "Expired", count: outcome.expired), Count(name: "Failed", count: outcome.failed),
                Count(name: "Targets", count: outcome.targets),
            ]
            platforms = outcome.platforms
            targetPlatforms = outcome.platforms.map(OutcomeXML.targetPlatforms) ?? "linux"
        }
    }

    struct Messages: Codable, Equatable {
        var messages: [Outcome]
        var latest: UInt64
    }

    struct ServiceHealth: Codable, Equatable {
        var service: String
        var up: Bool
        var status: String
        var version: String?
        var pid: Int32?
        var uptimeSeconds: Double?
        var details: [String: String]?
    }

    struct Health: Codable, Equatable {
        var status: String
        var services: [ServiceHealth]
    }

    struct ExpressionCheck: Codable, Equatable {
        var valid: Bool
        var tags: [String]?
        var code: String?
        var message: String?
        var position: Int?
    }

    static func response<T: Encodable>(_ status: Int, _ value: T, headers: [(String, String)] = []) -> HTTPResponse {
        GatewayResponse.json(status, HubCodec.encodeValue(value), headers: headers)
    }
}
