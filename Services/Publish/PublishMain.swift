import Auth
import Bus
import Foundation
import HubProtocol
import Postgres
import ServiceKit

/// `nh-publish`'s entry point, called by its executable and by `nh-services` (Services/Executables).
public enum PublishMain {
    public static func main(_ arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> Never {
        ServiceMain.run(name: "nh-publish", summary: "the publish service: accepts notifications from backends", arguments: arguments) { context in
            let config = context.config
            try context.prepareKeys()
            HubCatalogFollower.start(context: context)
            let (store, rich, group) = try PublishStorage.open(context)
            // The stream tells dispatchers there is something to pull; the store is the truth.
            let events = try context.bus.bindEvents(config.publish.events ?? "tcp://127.0.0.1:7712", startingAfter: try store.latestSequence())
            var endpoints: [String: String] = ["events": events.endpoints.first ?? ""]
            let history = StoreHistoryWatch(store, logger: context.logger)
            /// Scheduled sends abandoned since the start, for health and metrics.
            var abandonedSends = 0
            // Rich payloads travel base64 in the envelope, so this socket takes a third more than the payload limit.
            let server = try context.bus.bindRequests(
                config.publish.requests, group: group, maxMessageBytes: config.publishRequestBytes,
                endpoints: { endpoints }
            ) {
                var details = ["latest": String(events.sequence), "scheduledAbandonedTotal": String(abandonedSends)]
                do {
                    details["richPayloads"] = String(try rich.count)
                } catch {
                    details["richPayloadsError"] = "\(error)"
                }
                return details.merging(history.details) { $1 }
            }
            endpoints["requests"] = server.endpoint
            server.sizeHint = "a rich payload may be at most \(config.maxRichBytes) bytes (maxRichBytes), which travel base64-encoded"

            /// Announces, in order, what the store accepted beyond what the stream has announced: this
            /// process's sends and, on PostgreSQL, those of every other process sharing the store.
            /// Each message carries its notification whole (or its id, when large): see `NotificationStream`.
            let log = ChangeLog(
                events, topic: NotificationStream.topic, page: 100, read: { try store.stream(after: $0, limit: $1) }, sequence: \.sequence,
                body: \.body)

            func accept(_ send: SendNotification, timeToLive: Int, encoded: Data?) throws -> AcceptedNotification {
                let (accepted, isNew) = try store.accept(send, timeToLive: timeToLive, now: Date(), encoded: encoded)
                if isNew {
                    // Committed by then: the send stands even when the hint has to wait for the next heartbeat.
                    // One announcement covers every send of the group.
                    try group.afterCommit(once: "announce") {
                        do {
                            try log.publish()
                        } catch {
                            context.logger.warning("cannot announce accepted notifications yet", ("error", "\(error)"))
                        }
                    }
                    context.logger.debug("accepted", ("id", accepted.notificationId), ("sequence", accepted.sequence))
                }
                return accepted
            }

            // A user notification is stored by the sync store, and the reply comes once it is persisted
            // there. Posts are forwarded without waiting, so many can be in flight while this loop goes on.
            let sync = try context.bus.forwarder(config.sync.requests)
            context.loop.watch(sync.socket) { try sync.receive() }
            context.loop.every(milliseconds: 100) { sync.expire() }
            let handlers = PublishHandlers(context: context, store: store, rich: rich, accept: accept, latest: { events.sequence }, sync: sync)
            handlers.install(on: server)

            // Scheduled sends fire from the store, so one survives any restart and fires once.
            context.loop.every(milliseconds: 500) {
                let round = try handlers.fireScheduled(now: Date())
                for accepted in round.fired { context.logger.info("scheduled send fired", ("id", accepted.notificationId)) }
                for abandoned in round.abandoned {
                    context.logger.error(
                        "scheduled send abandoned: it no longer validates, and was not sent", ("id", abandoned.notificationId),
                        ("reason", abandoned.reason))
                }
                abandonedSends += round.abandoned.count
                if !round.fired.isEmpty { try log.publish() }
            }

            // A store that failed over to a replica that was behind has lost the sends it had not passed
            // on; its new history numbers sends above every one announced, and the stream goes on there.
            history.keep(
                log, counter: PostgresPublishStore.counter, latest: store.latestSequence, loop: context.loop,
                lost: "publish numbers {}, accepted before the failover and absent now", next: "dispatchers plan again from their stored cursors")

            // Other publish processes sharing the store: PostgreSQL tells of their accepts (LISTEN/NOTIFY),
            // read here without waiting every 50 ms, and they are announced on this stream too, so that a
            // dispatcher following any one process learns of every send. Every heartbeat announces
            // whatever the store holds beyond the stream, in case a notice was missed.
            if let postgres = store as? PostgresPublishStore, let url = config.store {
                let channel = PostgresPublishStore.notifyChannel
                let listener = try PostgresListener(url: url, channel: channel, report: context.logger.listening(on: channel))
                context.onShutdown { listener.close() }
                // The store's connection too comes back after the server went away.
                log.follow(
                    notices: listener.poll, loop: context.loop, heartbeatMs: config.heartbeatMs,
                    beforeBeat: postgres.connection.reconnectIfNeeded)
            }

            context.loop.every(milliseconds: 1_000) {
                let purged = try rich.purge(now: Date())
                if purged > 0 { context.logger.info("rich payloads expired", ("count", purged)) }
            }
            context.loop.every(milliseconds: 60_000) {
                _ = try store.purge(before: Date().addingTimeInterval(-86_400))
            }
        }
    }
}
