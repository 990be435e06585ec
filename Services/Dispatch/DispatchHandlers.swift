import DispatchCore
import Foundation
import HubProtocol
import Push
import ServiceKit

/// The dispatcher's requests on its request socket, beside health and metrics: push credentials
/// (Manage), a test send's results and outcomes (Send), and where an installation is served
/// (Manage). Each is a method, reachable in process; `install(on:)` serves them.
struct DispatchHandlers {
    let context: ServiceContext
    let store: any DeliveryStore
    let push: PushCenters
    /// Where an installation is served, from the core.
    let placement: (String) -> Placement
    /// The platforms the core delivers to for a hub (its qualifier; nil: the default hub), after its credentials change.
    let setPlatforms: (Set<String>, String?) -> Void
    /// Before the store is read for a request: the dispatcher writes the turns it has gathered.
    var beforeReading: () -> Void = {}

    func install(on server: HubServer) {
        server.on(PushCredentialsRequest.self) { try pushCredentials($0) }
        server.on(PushCredentialsSetRequest.self) { try setPushCredentials($0) }
        server.on(TestResultsRequest.self) { try testResults($0) }
        server.on(PlacementRequest.self) { try placement($0) }
        server.on(OutcomeRequest.self) { try outcome($0) }
    }

    /// A hub's push services: each hub's credentials are its own (an APNs key is for one app).
    func pushCredentials(_ request: Envelope<PushCredentialsRequest>) throws -> PushCredentialsReply {
        let scope = try context.authorize(request, needs: .manage)
        return PushCredentialsReply(services: push.info(hub: scope.sendHub))
    }

    func setPushCredentials(_ request: Envelope<PushCredentialsSetRequest>) throws -> PushCredentialsReply {
        let scope = try context.authorize(request, needs: .manage)
        let services: [PushServiceInfo]
        do {
            services = try push.set(request.payload, hub: scope.sendHub)
        } catch {
            throw HubError(.invalidArgument, "\(error)")
        }
        setPlatforms(Set(push.platforms(hub: scope.sendHub).map(\.rawValue)), scope.sendHub)
        context.logger.notice(
            "push credentials set", ("hub", scope.isDefault ? context.config.hub : scope.qualifier), ("services", services.map(\.service).joined(separator: ",")))
        return PushCredentialsReply(services: services)
    }

    func testResults(_ request: Envelope<TestResultsRequest>) throws -> TestResults {
        let scope = try context.authorize(request, needs: .send)
        beforeReading()
        guard try store.outcome(request.payload.notificationId, in: scope) != nil, var results = try store.testResults(request.payload.notificationId)
        else {
            throw HubError(.notFound, "the dispatcher has no test send '\(request.payload.notificationId)' yet")
        }
        for index in results.results.indices { results.results[index].installationId = scope.id(results.results[index].installationId) }
        return results
    }

    func placement(_ request: Envelope<PlacementRequest>) throws -> Placement {
        let scope = try context.authorize(request, needs: .manage)
        var placement = placement(scope.key(request.payload.installationId))
        placement.installationId = request.payload.installationId
        return placement
    }

    func outcome(_ request: Envelope<OutcomeRequest>) throws -> NotificationOutcome {
        let scope = try context.authorize(request, needs: .send)
        beforeReading()
        guard let outcome = try store.outcome(request.payload.notificationId, in: scope) else {
            throw HubError(.notFound, "the dispatcher has no notification '\(request.payload.notificationId)' yet")
        }
        return outcome
    }
}
