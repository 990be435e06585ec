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
    let push: PushCenter
    /// Where an installation is served, from the core.
    let placement: (String) -> Placement
    /// The platforms the core delivers to, after credentials change.
    let setPlatforms: (Set<String>) -> Void
    /// Before the store is read for a request: the dispatcher writes the turns it has gathered.
    var beforeReading: () -> Void = {}

    func install(on server: HubServer) {
        server.on(PushCredentialsRequest.self) { try pushCredentials($0) }
        server.on(PushCredentialsSetRequest.self) { try setPushCredentials($0) }
        server.on(TestResultsRequest.self) { try testResults($0) }
        server.on(PlacementRequest.self) { try placement($0) }
        server.on(OutcomeRequest.self) { try outcome($0) }
    }

    func pushCredentials(_ request: Envelope<PushCredentialsRequest>) throws -> PushCredentialsReply {
        try context.authorize(request.auth, needs: .manage)
        return PushCredentialsReply(services: push.info())
    }

    func setPushCredentials(_ request: Envelope<PushCredentialsSetRequest>) throws -> PushCredentialsReply {
        try context.authorize(request.auth, needs: .manage)
        let services: [PushServiceInfo]
        do {
            services = try push.set(request.payload)
        } catch {
            throw HubError(.invalidArgument, "\(error)")
        }
        setPlatforms(Set(push.platforms.map(\.rawValue)))
        context.logger.notice("push credentials set", ("services", services.map(\.service).joined(separator: ",")))
        return PushCredentialsReply(services: services)
    }

    func testResults(_ request: Envelope<TestResultsRequest>) throws -> TestResults {
        try context.authorize(request.auth, needs: .send)
        beforeReading()
        guard let results = try store.testResults(request.payload.notificationId) else {
            throw HubError(.notFound, "the dispatcher has no test send '\(request.payload.notificationId)' yet")
        }
        return results
    }

    func placement(_ request: Envelope<PlacementRequest>) throws -> Placement {
        try context.authorize(request.auth, needs: .manage)
        return placement(request.payload.installationId)
    }

    func outcome(_ request: Envelope<OutcomeRequest>) throws -> NotificationOutcome {
        try context.authorize(request.auth, needs: .send)
        beforeReading()
        guard let outcome = try store.outcome(request.payload.notificationId) else {
            throw HubError(.notFound, "the dispatcher has no notification '\(request.payload.notificationId)' yet")
        }
        return outcome
    }
}
