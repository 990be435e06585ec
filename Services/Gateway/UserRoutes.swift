import Foundation
import HTTPServer
import HubProtocol

/// `/{hub}/users`: a user's token, the user's own notifications (under `users/me`, with that
/// token) and their live stream, and a post to every device of a user.
struct UserRoutes {
    let services: GatewayServices
    /// Absent when the routes run in process, without the loop that feeds event streams.
    let streams: UserStreams?

    /// `POST /{hub}/users/tokens`: the sync store checks the credential the body holds.
    func token(_ request: HTTPRequest) throws -> HTTPResponse {
        let body = try GatewayJSON.decode(GatewayJSON.TokenRequest.self, request.body, "a JSON object with the user's credential, from nhctl user credential")
        return GatewayResponse.json(200, HubCodec.encodePayload(try services.sync.call(UserTokenRequest(credential: body.credential))))
    }

    func changes(_ request: HTTPRequest, token: String) throws -> HTTPResponse {
        let limit = request.query["limit"].flatMap(Int.init)
        let cursor = UInt64(request.query["cursor"] ?? "0") ?? 0
        return GatewayResponse.json(200, HubCodec.encodePayload(
            try services.sync.call(UserChangesRequest(cursor: cursor, limit: limit), auth: token)))
    }

    func history(token: String) throws -> HTTPResponse {
        GatewayResponse.json(200, HubCodec.encodePayload(try services.sync.call(UserHistoryRequest(), auth: token)))
    }

    func setState(_ id: String, _ request: HTTPRequest, token: String) throws -> HTTPResponse {
        let body = try GatewayJSON.decode(GatewayJSON.StateChange.self, request.body, "a JSON object with readState and/or userActionState")
        let (read, action) = try body.states()
        let reply = try services.sync.call(
            UpdateUserNotificationState(id: id, readState: read, userActionState: action, device: request.header("x-device")),
            auth: token)
        return GatewayResponse.json(200, HubCodec.encodePayload(reply))
    }

    func delete(_ id: String, _ request: HTTPRequest, token: String) throws -> HTTPResponse {
        _ = try services.sync.call(DeleteUserNotification(id: id, device: request.header("x-device")), auth: token)
        return GatewayResponse.empty(204)
    }

    /// `GET /{hub}/users/me/notifications/stream`: server-sent events of the user's changes from the
    /// cursor in `Last-Event-ID` or `?cursor=` (absent: from now).
    func openStream(_ request: HTTPRequest, _ caller: StreamUser) throws -> HTTPResponse {
        let token = caller.token
        let given = request.header("last-event-id") ?? request.query["cursor"]
        var cursor: UInt64
        if let given {
            guard let value = UInt64(given) else { throw HubError(.invalidArgument, "the cursor '\(given)' must be a whole number, as a previous event's id") }
            cursor = value
            // The store checks the token and the cursor now, so that either is refused with its status.
            _ = try services.sync.call(UserChangesRequest(cursor: cursor, limit: 1), auth: token)
        } else {
            cursor = try services.sync.call(UserHistoryRequest(), auth: token).cursor
        }
        guard let streams else { throw HubError(.unavailable, "this gateway serves no event streams") }
        let stream = try streams.open(user: caller.user, token: token, cursor: cursor)
        return HTTPResponse(
            status: 200,
            headers: [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")],
            stream: stream)
    }

    /// `POST /{hub}/users/{user}/notifications`: a notification to every device of the user.
    func post(to user: String, _ request: HTTPRequest) throws -> HTTPResponse {
        guard var object = JSONValue.parse(request.body)?.objectValue else {
            throw HubError(.invalidPayload, "the body must be a JSON object with appNotificationId and visual and/or raw content, or encrypted content")
        }
        object["userId"] = .string(user)
        let post = try HubCodec.decodePayload(PostUserNotification.self, from: try JSONValue.object(object).encoded())
        let reply = try services.publish.call(post)
        return GatewayResponse.json(201, HubCodec.encodePayload(reply),
                                    headers: [("Location", "\(services.baseURL(request))\(request.path)/\(reply.notification.id)")])
    }

    /// `GET /{hub}/users/{user}/key` (Send): the user's public key, for a backend to encrypt a post.
    func key(of user: String) throws -> HTTPResponse {
        GatewayResponse.json(200, HubCodec.encodePayload(try services.sync.call(UserKeyRequest(userId: user))))
    }

    /// `GET /{hub}/users/me/key?device=`: the user's own key record.
    func ownKey(_ request: HTTPRequest, token: String) throws -> HTTPResponse {
        let reply = try services.sync.call(UserKeyRequest(device: request.query["device"]), auth: token)
        return GatewayResponse.json(200, HubCodec.encodePayload(reply))
    }

    /// `PUT /{hub}/users/me/key`: a device sets the user's key (`user.key.put`'s fields).
    func putKey(_ request: HTTPRequest, token: String) throws -> HTTPResponse {
        let put = try HubCodec.decodePayload(PutUserKey.self, from: request.body)
        return GatewayResponse.json(200, HubCodec.encodePayload(try services.sync.call(put, auth: token)))
    }

    /// `POST /{hub}/users/me/pairing`: one step of pairing a device (`user.pairing`'s fields).
    func pairing(_ request: HTTPRequest, token: String) throws -> HTTPResponse {
        let step = try HubCodec.decodePayload(UserPairingRequest.self, from: request.body)
        return GatewayResponse.json(200, HubCodec.encodePayload(try services.sync.call(step, auth: token)))
    }
}
