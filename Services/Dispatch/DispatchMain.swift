import Bus
import DispatchCore
import Foundation
import HubProtocol
import Push
import ServiceKit

/// `nh-dispatch`'s entry point, called by its executable and by `nh-services` (Services/Executables):
/// the dispatcher's parts, made and wired to `DispatchShell`, which carries out what the core decides.
public enum DispatchMain {
    public static func main(_ arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> Never {
        // Two I/O threads share the agents' CURVE handshakes and encryption; set before any socket exists.
        ZMQContext.shared.setIOThreads(2)
        ServiceMain.run(
            name: "nh-dispatch", summary: "the dispatcher: resolves targets and delivers to client agents", arguments: arguments,
            check: { config in try PushCenter.check(settings: config.push, dataDir: config.dataDir) }
        ) { context in
            let config = context.config
            try context.prepareKeys()
            HubCatalogFollower.start(context: context)
            var settings = DispatcherSettings(agentHeartbeat: Double(config.agentHeartbeatMs) / 1000, maxAgents: config.limits.agents)
            // Phones and browsers: each platform's push service, on a thread of its own for HTTP, with
            // its answers handled on this loop, through the mailbox, after the writes of the turn they come in.
            let mailbox = try LoopMailbox()
            let push: PushCenters
            do {
                push = try PushCenters(
                    settings: config.push, dataDir: config.dataDir, post: { mailbox.post($0) },
                    note: { message, fields in context.logger.log(.warning, message, fields.map { ($0.0, $0.1) }) })
            } catch {
                throw ConfigError("\(error)")
            }
            context.onShutdown { push.stop() }
            for (hub, platforms) in push.platformsByHub {
                if hub.isEmpty {
                    settings.platforms.formUnion(platforms)
                } else {
                    settings.hubPlatforms[hub] = platforms.union([Platform.linux.rawValue])
                }
                if !platforms.isEmpty {
                    context.logger.info("push services", ("hub", hub.isEmpty ? config.hub : hub), ("platforms", platforms.sorted().joined(separator: ",")))
                }
            }

            // A hub deleted takes its push services' credentials with it. (One deleted while this service
            // was down leaves its folder, which no hub reads again: a hub made again is a new generation.)
            context.hubs.watchRemovals(loop: context.loop) { gone in
                if push.remove(hub: gone.qualifier) { context.logger.info("a deleted hub's push credentials removed", ("hub", gone.qualifier)) }
            }

            let agents = try DispatchShell.agentSocket(context)
            // On a shared store, dispatchers split the agents by shard, each named by the endpoint it advertises.
            let advertise = config.dispatch.advertise ?? agents.lastEndpoint
            let leasePeriod = Double(config.leasePeriodMs) / 1000
            let store = try DispatchShell.openStore(context, advertise: advertise, leasePeriod: leasePeriod)
            let publish = try context.bus.forwarder(config.publish.requests)
            let registryWrites = try context.bus.forwarder(config.registry.requests)
            // The registry's change stream keeps the index current; a gap or a late start takes a snapshot.
            let registry = try RegistryFeed(
                registry: try context.bus.client(config.registry.requests, policy: RetryPolicy(timeout: 2_000, attempts: 1)),
                connect: config.registry.events ?? "tcp://127.0.0.1:7702", curve: context.bus.security?.client)
            context.onShutdown { registry.close() }
            let dispatch = DispatchShell(
                context: context, settings: settings, inbox: AgentInbox(
                    messagesPerSecond: config.limits.agentMessagesPerSecond, installationKey: { [hubs = context.hubs] in hubs.installationKey($0) }),
                store: store,
                leases: ShardLeaseKeeper(store: store, id: advertise, period: leasePeriod), push: push, agents: agents,
                publish: publish, registryWrites: registryWrites, registry: registry, shared: config.storeIsPostgres)
            // Before the store closes (closers run newest first): turns gathered in memory are written.
            context.onShutdown { dispatch.writeGathered() }
            context.loop.watch(mailbox) {
                dispatch.pushAnswered()
                dispatch.commit()
            }
            context.loop.every(milliseconds: 50) { dispatch.commitGroupIfDue() }
            context.loop.watch(registry.socket) {
                try dispatch.readRegistry()
                dispatch.commit()
            }
            // The snapshot first, so that agents are told the truth about their installations from
            // the start; a registry not up yet is asked again as its stream comes.
            do { try dispatch.readRegistry() } catch { context.logger.warning("registry snapshot not read yet", ("error", "\(error)")) }
            if !dispatch.shared {
                // Agents here when the dispatcher stopped left then, at its cursor.
                try store.closePositions(shards: nil)
                dispatch.handle(.parked(try store.parked(now: Date(), shards: nil), cursor: try store.cursor()))
                dispatch.handle(.backlog(try store.backlog(now: Date())))
                try dispatch.resumePush()
            }
            context.loop.watch(registryWrites.socket) { try registryWrites.receive() }

            var endpoints: [String: String] = ["agents": agents.lastEndpoint]
            let server = try context.bus.bindRequests(config.dispatch.requests, endpoints: { endpoints }) { dispatch.health() }
            endpoints["requests"] = server.endpoint
            DispatchHandlers(
                context: context, store: store, push: push, placement: { dispatch.core.placement(of: $0, advertised: advertise) },
                setPlatforms: { dispatch.setPlatforms($0, hub: $1) }, beforeReading: { dispatch.writeGathered() }
            ).install(on: server)

            context.loop.watch(publish.socket) { try publish.receive(); dispatch.commit() }
            // As many messages at a time as the loop plans from the stream at once: the rest wait
            // on the socket for its next pass, not pulled from the publish service's store.
            try context.bus.followBatches(
                config.publish.events ?? "tcp://127.0.0.1:7712", limit: PullControl.streamedPages * PullControl.maxPage
            ) { dispatch.streamed($0) }
            // The sync store's stream: a user's notifications changed, so signal that user's other devices.
            try context.bus.followHints(
                config.sync.events ?? "tcp://127.0.0.1:7732",
                apply: { dispatch.handle(.userChanged(try HubCodec.decode(UserNotificationsChanged.self, from: $0.body).payload)) },
                gap: { dispatch.userStreamGap(at: $0) })
            context.loop.watch(agents) { try dispatch.readAgents() }

            context.loop.every(milliseconds: 100) { dispatch.tick() }
            if dispatch.shared {
                dispatch.keepLeases()
                // After a pause (the process stopped, or a handler ran long) the leases come first, before
                // any message that waited: the fence on every write is the guarantee, this the fast path.
                context.loop.onStall(after: .milliseconds(Int(dispatch.leases.margin * 1_000))) { gap in
                    context.logger.warning("the loop stalled; checking leases first", ("ms", Int(gap / .milliseconds(1))))
                    dispatch.keepLeases()
                }
            }
            context.loop.every(milliseconds: config.heartbeatMs) { try dispatch.heartbeat() }
            context.loop.every(milliseconds: 600_000) { try dispatch.purge() }
        }
    }
}
