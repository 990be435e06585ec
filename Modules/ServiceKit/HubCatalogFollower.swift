import Bus
import Foundation
import HubProtocol
import Synchronization

/// Keeps a service's `HubDirectory` as the registry's hub catalog is: asks the registry every
/// `interval` for what changed since the version it holds, on a thread of its own so that a
/// registry that does not answer never holds up the service's loop. A hub made, a policy added
/// or a key regenerated reaches every service within about one interval; until the first answer,
/// only the default hub is served (with `keys.json`'s keys), and others get `unavailable`.
public final class HubCatalogFollower: Sendable {
    private let stopped = Atomic<Bool>(false)
    public static let interval: TimeInterval = 1

    /// Starts following for `context`, whose keys are loaded and bus secured; stops at its shutdown.
    @discardableResult
    public static func start(context: ServiceContext) -> HubCatalogFollower {
        let follower = HubCatalogFollower()
        let directory = context.hubs
        let admission = context.bus.admission
        let endpoint = context.config.registry.requests
        let curve = context.bus.security?.client
        let token = context.serviceToken()
        let logger = context.logger
        let policy = RetryPolicy(timeout: context.config.requestTimeoutMs, attempts: 1)
        let thread = Thread {
            let client: HubClient
            do {
                client = try HubClient(connect: endpoint, policy: policy, curve: curve, auth: { token })
            } catch {
                logger.error("cannot follow the hub catalog", ("registry", endpoint), ("error", "\(error)"))
                return
            }
            defer { client.close() }
            var failures = 0
            while !follower.stopped.load(ordering: .relaxed) {
                do {
                    let catalog = try client.call(HubCatalogRequest(after: directory.version))
                    if directory.apply(catalog) {
                        admission.setHubKeys(directory.busKeys)
                        logger.info("hub catalog read", ("version", "\(catalog.version)"), ("hubs", "\(directory.catalogHubs.count)"))
                    }
                    failures = 0
                } catch {
                    failures += 1
                    // Said once, then every minute: the registry may be starting.
                    if failures == 3 || failures % 60 == 0 {
                        logger.warning("the registry does not answer for the hub catalog", ("registry", endpoint), ("error", "\(error)"))
                    }
                }
                Thread.sleep(forTimeInterval: directory.version == nil ? interval / 4 : interval)
            }
        }
        thread.name = "hub-catalog"
        thread.start()
        context.onShutdown { follower.stopped.store(true, ordering: .relaxed) }
        return follower
    }
}
