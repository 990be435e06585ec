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
    let push: PushCenters
    let handlers: DispatchHandlers
    let platforms = Box<Set<String>>([])
    let platformsHub = Box<String?>(nil)

    init() throws {
        harness = try ServiceHarness(service: "nh-dispatch")
        store = try StoreEngine.sqlite.makeStore()
        push = try PushCenters(settings: PushSettings(), dataDir: harness.dataDir, post: { $0() })
        let platforms = self.platforms, platformsHub = self.platformsHub
        handlers = DispatchHandlers(
            context: harness.context, store: store, push: push,
            placement: { Placement(installationId: $0, shard: Shards.of($0), servedBy: "tcp://here:7722", askedDispatcher: "tcp://here:7722", connected: false) },
            setPlatforms: { platforms.value = $0; platformsHub.value = $1 })
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

    @Test("each hub's push credentials are its own: set with its key, kept in its folder, with a VAPID key of its own")
    func credentialsPerHub() throws {
        let keys = KeyStore.defaultHubKeys()
        let news = HubDescription(
            name: "news", createdAt: Fixture.now,
            policies: keys.map { HubPolicy(name: $0.name, rights: $0.rights.names, key: $0.key, secondaryKey: $0.secondaryKey) })
        harness.context.hubs.apply(HubCatalog(version: 1, hubs: [news]))
        let newsFull = harness.context.token(for: keys[1], hub: "news")
        func envelope<R: HubRequest>(_ payload: R, auth: String, hub: String?) -> Envelope<R> { Envelope(id: "1", auth: auth, hub: hub, payload: payload) }
        let browser = PushCredentialsSetRequest(browser: WebPushSettings(subject: "mailto:ops@example.org"))
        let theirs = try handlers.setPushCredentials(envelope(browser, auth: newsFull, hub: "news")).services
        #expect(theirs.map(\.service) == ["browser"] && platformsHub.value == "news" && platforms.value.contains(Platform.browser.rawValue))
        let full = token(AccessKey.defaultFullName)
        #expect(try handlers.pushCredentials(envelope(PushCredentialsRequest(), auth: full, hub: nil)).services.isEmpty)
        #expect(FileManager.default.fileExists(atPath: harness.dataDir + "/hubs/news/push-credentials.json"))
        let mine = try handlers.setPushCredentials(envelope(browser, auth: full, hub: nil)).services
        #expect(platformsHub.value == nil)
        #expect(mine.first?.publicKey != nil && mine.first?.publicKey != theirs.first?.publicKey)
        // Another hub's key may not touch them.
        #expect(code { try self.handlers.pushCredentials(envelope(PushCredentialsRequest(), auth: newsFull, hub: nil)) } == .unauthorized)
        // A delivery to a hub without credentials is reported failed at once, never sent.
        push.submit(PushMessage(
            deliveryId: "d", notificationId: "n", installationId: "other/i", platform: .apns, pushChannel: "AB", payload: "{}", expiresAt: Fixture.now + 60))
        #expect(push.takeReports().map(\.1) == [.failed(outcome: "PnsUnavailable", reason: "hub 'other' has no credentials for apns's push service")])
        // The hub deleted: its credentials and VAPID key go with it.
        #expect(push.remove(hub: "news") && !push.remove(hub: "news"))
        #expect(!FileManager.default.fileExists(atPath: harness.dataDir + "/hubs/news") && push.info(hub: "news").isEmpty)
    }
}
