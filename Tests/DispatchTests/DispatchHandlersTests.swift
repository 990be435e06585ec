import Auth
import DispatchCore
import Foundation
import HubProtocol
import Push
import ServiceKit
import TestSupport
import Testing

@testable import NHDispatch

/// The dispatcher's request handlers in process: a store on SQLite, a push center without
/// credentials, and tokens signed with the hub's own keys.
@Suite("Dispatcher request handlers")
final class DispatchHandlersTests {
    let harness: ServiceHarness
    let store: any DeliveryStore
    let push: PushCenter
    let handlers: DispatchHandlers
    let platforms = Box<Set<String>>([])

    init() throws {
        harness = try ServiceHarness(service: "nh-dispatch")
        store = try StoreEngine.sqlite.makeStore()
        push = try PushCenter(settings: PushSettings(), dataDir: harness.dataDir, post: { $0() })
        let platforms = self.platforms
        handlers = DispatchHandlers(
            context: harness.context, store: store, push: push,
            placement: { Placement(installationId: $0, shard: Shards.of($0), servedBy: "tcp://here:7722", askedDispatcher: "tcp://here:7722", connected: false) },
            setPlatforms: { platforms.value = $0 })
    }

    deinit { push.stop() }

    func token(_ name: String) -> String { harness.sas(name) }
    func code(_ body: () throws -> Any) -> ErrorCode? { harness.code(body) }

    @Test("each request needs its right: Send for outcomes and test results, Manage for credentials and placement")
    func rights() {
        let listen = token(AccessKey.defaultListenName)
        #expect(code { try handlers.outcome(Envelope(id: "1", payload: OutcomeRequest(notificationId: "n"))) } == .unauthorized)
        // No token is unauthorized; a valid one without the right is forbidden.
        #expect(code { try handlers.outcome(Envelope(id: "1", auth: listen, payload: OutcomeRequest(notificationId: "n"))) } == .forbidden)
        #expect(code { try handlers.testResults(Envelope(id: "1", auth: listen, payload: TestResultsRequest(notificationId: "n"))) } == .forbidden)
        #expect(code { try handlers.pushCredentials(Envelope(id: "1", auth: listen, payload: PushCredentialsRequest())) } == .forbidden)
        #expect(code { try handlers.placement(Envelope(id: "1", auth: listen, payload: PlacementRequest(installationId: "i"))) } == .forbidden)
    }

    @Test("outcomes and test results come from the store; one not there is not_found, naming it")
    func fromTheStore() throws {
        let full = token(AccessKey.defaultFullName)
        #expect(code { try handlers.outcome(Envelope(id: "1", auth: full, payload: OutcomeRequest(notificationId: "n1"))) } == .notFound)
        try store.record(Fixture.notification("n1", sequence: 1), plans: [Fixture.plan("n1", "a")], sent: [], now: Fixture.now)
        let outcome = try handlers.outcome(Envelope(id: "1", auth: full, payload: OutcomeRequest(notificationId: "n1")))
        #expect(outcome.notificationId == "n1" && outcome.targets == 1)
        #expect(code { try handlers.testResults(Envelope(id: "1", auth: full, payload: TestResultsRequest(notificationId: "n1"))) } == .notFound)
        let placement = try handlers.placement(Envelope(id: "1", auth: full, payload: PlacementRequest(installationId: "i9")))
        #expect(placement.shard == Shards.of("i9") && placement.servedBy == "tcp://here:7722")
    }

    @Test("credentials: a bad set is invalid_argument and changes nothing; a good one tells the core its platforms")
    func credentials() throws {
        let full = token(AccessKey.defaultFullName)
        #expect(try handlers.pushCredentials(Envelope(id: "1", auth: full, payload: PushCredentialsRequest())).services.isEmpty)
        let bad = PushCredentialsSetRequest(browser: WebPushSettings(subject: "not a url"))
        #expect(code { try handlers.setPushCredentials(Envelope(id: "1", auth: full, payload: bad)) } == .invalidArgument)
        #expect(platforms.value.isEmpty)
        let good = PushCredentialsSetRequest(browser: WebPushSettings(subject: "mailto:ops@example.org"))
        let reply = try handlers.setPushCredentials(Envelope(id: "1", auth: full, payload: good))
        #expect(reply.services.map(\.service) == ["browser"])
        #expect(platforms.value == [Platform.browser.rawValue])
    }
}
