import Bus
import Foundation
import HTTPServer
import HubProtocol
import ServiceKit
import Synchronization

/// Server-sent event streams of users' notification changes (`GET /{hub}/users/me/notifications/stream`).
///
/// Everything here runs on the gateway's event loop: it follows the sync store's change stream and,
/// when one of a user's notifications changes, fetches that user's changes after each open stream's
/// cursor, with the stream's own user token, and writes them as events. The cursor is each event's
/// `id`, so a client that reconnects with `Last-Event-ID` (or `?cursor=`) misses nothing. A gap in
/// the change stream makes every stream fetch. Streams opened by the HTTP workers are taken in on
/// the loop's next tick.
final class UserStreams: @unchecked Sendable {
    /// One open stream.
    final class Subscriber: @unchecked Sendable {
        let user: String
        let token: String
        var cursor: UInt64
        let stream: HTTPStream
        init(user: String, token: String, cursor: UInt64, stream: HTTPStream) {
            self.user = user
            self.token = token
            self.cursor = cursor
            self.stream = stream
        }
    }

    /// Seconds between comment lines that keep idle connections and proxies from closing the stream.
    static let keepAliveSeconds = 15
    /// A call for a subscriber, with its token, naming its user's hub (the key names it).
    private func call<R: HubRequest>(_ request: R, for subscriber: Subscriber) throws -> R.Reply {
        let hub = HubScope.of(key: subscriber.user).envelopeHub
        sync.hub = { hub }
        return try sync.call(request, auth: subscriber.token)
    }

    /// A client that has not taken this much is too slow; its stream ends and it resumes from its cursor.
    static let maxQueuedBytes = 1 << 20
    /// Streams one user may have open at once (tabs and devices); one more is refused with rate_limited.
    static let maxPerUser = 16
    private let perUser = Mutex<[String: Int]>([:])

    private let context: ServiceContext
    private let sync: HubClient
    private let incoming = Mutex<[Subscriber]>([])
    private var byUser: [String: [ObjectIdentifier: Subscriber]] = [:]
    let openCount = Atomic<Int>(0)

    init(context: ServiceContext) throws {
        self.context = context
        let config = context.config
        sync = try context.bus.client(config.sync.requests, policy: RetryPolicy(timeout: config.requestTimeoutMs, attempts: 1))
        try context.bus.followHints(
            config.sync.events ?? "tcp://127.0.0.1:7732",
            apply: { [unowned self] message in
                let change: UserNotificationsChanged
                do {
                    change = try HubCodec.decode(UserNotificationsChanged.self, from: message.body).payload
                } catch {
                    // A change that does not read does not say whose it is: every stream reads again, as after a gap.
                    context.logger.warning("a user change on the sync stream does not read; every stream reads again", ("error", "\(error)"))
                    for user in byUser.keys { deliver(user) }
                    return
                }
                if let streams = byUser[change.userId], streams.values.contains(where: { $0.cursor < change.sequence }) {
                    deliver(change.userId)
                }
            },
            gap: { [unowned self] _ in
                for user in byUser.keys { deliver(user) }
            })
        context.loop.every(milliseconds: 25) { [unowned self] in adopt() }
        context.loop.every(milliseconds: Self.keepAliveSeconds * 1_000) { [unowned self] in keepAlive() }
    }

    /// Called on an HTTP worker: the stream is answered now and filled from the loop.
    func open(user: String, token: String, cursor: UInt64) throws -> HTTPStream {
        let admitted = perUser.withLock { counts in
            guard counts[user, default: 0] < Self.maxPerUser else { return false }
            counts[user, default: 0] += 1
            return true
        }
        guard admitted else {
            throw HubError(.rateLimited, "user '\(user)' has \(Self.maxPerUser) streams open; close one, or retry later")
        }
        let stream = HTTPStream()
        stream.write(Data("retry: 2000\n\n".utf8))
        stream.write(Self.event(id: cursor, name: "ready", data: Data(#"{"cursor":\#(cursor)}"#.utf8)))
        let subscriber = Subscriber(user: user, token: token, cursor: cursor, stream: stream)
        incoming.withLock { $0.append(subscriber) }
        openCount.add(1, ordering: .relaxed)
        stream.onEnd { [weak self] in
            self?.openCount.subtract(1, ordering: .relaxed)
            self?.perUser.withLock { counts in
                counts[user, default: 1] -= 1
                if counts[user] == 0 { counts.removeValue(forKey: user) }
            }
        }
        return stream
    }

    /// Takes in the streams the workers opened, and sends each what changed since its cursor.
    private func adopt() {
        let new = incoming.withLock { list in
            defer { list.removeAll() }
            return list
        }
        for subscriber in new where subscriber.stream.isOpen {
            byUser[subscriber.user, default: [:]][ObjectIdentifier(subscriber)] = subscriber
            fill(subscriber)
        }
    }

    private func deliver(_ user: String) {
        for subscriber in Array((byUser[user] ?? [:]).values) { fill(subscriber) }
    }

    /// Fetches and writes the subscriber's changes after its cursor, a page at a time.
    private func fill(_ subscriber: Subscriber) {
        guard subscriber.stream.isOpen else { return drop(subscriber) }
        do {
            // A page at a time while the client keeps up; a client that does not is ended below.
            for _ in 0..<50 where subscriber.stream.queuedBytes <= Self.maxQueuedBytes {
                let page = try call(UserChangesRequest(cursor: subscriber.cursor, limit: 100), for: subscriber)
                for change in page.changes {
                    subscriber.stream.write(Self.event(id: change.sequence, name: change.kind.rawValue, data: HubCodec.encodeValue(change)))
                }
                subscriber.cursor = page.cursor
                if !page.hasMore { break }
            }
            if subscriber.stream.queuedBytes > Self.maxQueuedBytes {
                subscriber.stream.finish()
                drop(subscriber)
            }
        } catch let error as HubError where error.code == .historyRewound {
            reset(subscriber, error)
        } catch let error as HubError where error.code == .timeout || error.code == .unavailable {
            // The sync store is away; the next change, gap or keep-alive tries again.
            context.logger.debug("user stream fetch failed", ("error", error.message))
        } catch {
            // An expired token or a cursor the store no longer has: say so and end; the client
            // comes back with a new token or from cursor 0.
            let failure = error as? HubError ?? HubError(.internal, "\(error)")
            subscriber.stream.write(Self.event(id: nil, name: "error", data: HubCodec.encodePayload(
                ErrorReply(code: failure.code, message: failure.message))))
            subscriber.stream.finish()
            drop(subscriber)
        }
    }

    /// The stream's cursor names changes the store no longer holds (it failed over to a replica that
    /// was behind): a `reset` event, then the user's current notifications as `created` events, then
    /// `ready` under the cursor they stand at. Only `ready` carries an id, so a client cut off before
    /// it comes back with the old cursor and is reset again.
    private func reset(_ subscriber: Subscriber, _ error: HubError) {
        do {
            let history = try call(UserHistoryRequest(), for: subscriber)
            subscriber.stream.write(Self.event(id: nil, name: "reset", data: HubCodec.encodePayload(
                ErrorReply(code: error.code, message: error.message))))
            for notification in history.notifications {
                let change = UserNotificationChange(kind: .created, sequence: history.cursor, id: notification.id, notification: notification)
                subscriber.stream.write(Self.event(id: nil, name: change.kind.rawValue, data: HubCodec.encodeValue(change)))
            }
            subscriber.stream.write(Self.event(id: history.cursor, name: "ready", data: Data(#"{"cursor":\#(history.cursor)}"#.utf8)))
            subscriber.cursor = history.cursor
            context.logger.info("user stream reset to the store's history", ("user", subscriber.user), ("cursor", history.cursor))
        } catch {
            // The store is away, or the token ran out: the client comes back and is reset then.
            subscriber.stream.finish()
            drop(subscriber)
        }
    }

    private func drop(_ subscriber: Subscriber) {
        byUser[subscriber.user]?.removeValue(forKey: ObjectIdentifier(subscriber))
        if byUser[subscriber.user]?.isEmpty == true { byUser.removeValue(forKey: subscriber.user) }
    }

    /// A comment on every stream, and a fetch for any whose change hint was missed.
    private func keepAlive() {
        for subscribers in Array(byUser.values) {
            for subscriber in subscribers.values {
                if subscriber.stream.write(Data(": keep-alive\n\n".utf8)) { fill(subscriber) } else { drop(subscriber) }
            }
        }
    }

    static func event(id: UInt64?, name: String, data: Data) -> Data {
        var text = ""
        if let id { text += "id: \(id)\n" }
        text += "event: \(name)\ndata: "
        var out = Data(text.utf8)
        // Encoded JSON has no raw newlines, so one data line carries it.
        out.append(data)
        out.append(contentsOf: Array("\n\n".utf8))
        return out
    }
}
