import Foundation
import HubProtocol
import Testing

@testable import DispatchCore

/// One index holds every hub's installations by their keys; a send names its hub, and reaches that
/// hub's installations alone, though another hub has the same ids, tags and users.
@Suite("Targets by hub")
struct HubScopedTargetsTests {
    static let now = TargetResolverTests.now

    static var index: InstallationIndex {
        TargetResolverTests.index([
        TargetResolverTests.installation("dup", tags: ["World"], user: "alice"),
        TargetResolverTests.installation("only-home", tags: ["Sports"]),
        TargetResolverTests.installation("news/dup", tags: ["World"], user: "alice"),
        TargetResolverTests.installation("news/only-news", tags: ["Sports"]),
        TargetResolverTests.installation("sport/x", tags: ["World"]),
        ])
    }

    func targets(_ send: SendNotification) -> [String] {
        var resolver = TargetResolver()
        let notification = AcceptedNotification(sequence: 1, notificationId: "n", send: send, enqueuedAt: Self.now, expiresAt: Self.now + 60)
        return resolver.plan(notification, index: Self.index, now: Self.now).map(\.installationId).sorted()
    }

    func send(hub: String?, tags: String? = nil, installation: String? = nil, user: String? = nil) -> SendNotification {
        var send = SendNotification(
            format: .template, properties: ["messageParam": "hi"], tagExpression: tags, installationId: installation, userId: user)
        send.hub = hub
        return send
    }

    @Test("a tag, a negation, everyone, an installation, a user and $InstallationId reach the send's hub alone")
    func sealed() {
        #expect(targets(send(hub: nil, tags: "World")) == ["dup"])
        #expect(targets(send(hub: "news", tags: "World")) == ["news/dup"])
        #expect(targets(send(hub: "news", tags: "!World")) == ["news/only-news"])
        #expect(targets(send(hub: nil, tags: "!World")) == ["only-home"])
        #expect(targets(send(hub: "news")) == ["news/dup", "news/only-news"])
        #expect(targets(send(hub: nil)) == ["dup", "only-home"])
        #expect(targets(send(hub: "news", installation: "dup")) == ["news/dup"])
        #expect(targets(send(hub: "news", installation: "only-home")) == [])
        #expect(targets(send(hub: "news", user: "alice")) == ["news/dup"])
        #expect(targets(send(hub: nil, user: "alice")) == ["dup"])
        #expect(targets(send(hub: "news", tags: "$InstallationId:dup")) == ["news/dup"])
        #expect(targets(send(hub: "news", tags: "$UserId:alice || Sports")) == ["news/dup", "news/only-news"])
        #expect(targets(send(hub: "gone", tags: "World")) == [])
        #expect(Self.index.hubCount == 3)
    }

    @Test("removing an installation removes it from its hub's lists alone")
    func removal() {
        var index = Self.index
        index.apply(InstallationChanged(change: .deleted, installationId: "news/dup"))
        #expect(index.everyone(in: HubScope(named: "news")).map(\.installationId) == ["news/only-news"])
        #expect(index.installations(ofUser: "news/alice").isEmpty && index.installations(ofUser: "alice").map(\.installationId) == ["dup"])
        index.apply(InstallationChanged(change: .deleted, installationId: "news/only-news"))
        #expect(index.hubCount == 2 && index.everyone(in: HubScope(named: "news")).isEmpty)
    }
}
