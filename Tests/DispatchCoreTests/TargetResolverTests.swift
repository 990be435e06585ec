import Foundation
import HubProtocol
import Tags
import Testing

@testable import DispatchCore

@Suite("Target resolution")
struct TargetResolverTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func installation(
        _ id: String, tags: [String], user: String? = nil, templates: [String: InstallationTemplate] = [:],
        expires: Date? = nil
    ) -> Installation {
        Installation(
            installationId: id, pushChannel: id, tags: tags, userId: user,
            templates: templates.isEmpty ? ["t": InstallationTemplate(body: #"{"m":"$(messageParam)"}"#)] : templates,
            expirationTime: expires)
    }

    static func index(_ installations: [Installation]) -> InstallationIndex {
        var index = InstallationIndex()
        index.replace(with: RegistrySnapshot(sequence: 1, installations: installations))
        return index
    }

    static func send(_ expression: String?, format: NotificationFormat = .template, body: String? = nil,
                     installation: String? = nil, user: String? = nil) -> AcceptedNotification {
        AcceptedNotification(
            sequence: 1, notificationId: "n",
            send: SendNotification(
                format: format, body: body, properties: format == .template ? ["messageParam": "hi"] : nil,
                tagExpression: expression, installationId: installation, userId: user),
            enqueuedAt: now, expiresAt: now.addingTimeInterval(60))
    }

    func plan(_ notification: AcceptedNotification, _ index: InstallationIndex) -> [String] {
        var resolver = TargetResolver()
        return resolver.plan(notification, index: index, now: Self.now).map(\.deliveryId).sorted()
    }

    @Test("one delivery per matching template; a template's own tags count for it alone")
    func templateTags() {
        let index = Self.index([
            Self.installation("i1", tags: ["World"], templates: [
                "plain": InstallationTemplate(body: #"{"m":"$(messageParam)"}"#),
                "sports": InstallationTemplate(body: #"{"s":"$(messageParam)"}"#, tags: ["Sports"]),
            ])
        ])
        #expect(plan(Self.send("World"), index) == ["n/i1/plain", "n/i1/sports"])
        #expect(plan(Self.send("Sports"), index) == ["n/i1/sports"])
        #expect(plan(Self.send("World && Sports"), index) == ["n/i1/sports"])
        #expect(plan(Self.send("Politics"), index).isEmpty)
    }

    @Test("installation, user and special tags; expired installations get nothing")
    func targets() {
        let index = Self.index([
            Self.installation("i1", tags: ["World"], user: "alice"),
            Self.installation("i2", tags: ["World"], user: "alice"),
            Self.installation("i3", tags: ["World"], user: "bob"),
            Self.installation("old", tags: ["World"], expires: Self.now.addingTimeInterval(-1)),
        ])
        #expect(plan(Self.send("World"), index) == ["n/i1/t", "n/i2/t", "n/i3/t"])
        #expect(plan(Self.send(nil, user: "alice"), index) == ["n/i1/t", "n/i2/t"])
        #expect(plan(Self.send(nil, installation: "i3"), index) == ["n/i3/t"])
        #expect(plan(Self.send("$UserId:bob || $InstallationId:i1"), index) == ["n/i1/t", "n/i3/t"])
        #expect(plan(Self.send("!World"), index).isEmpty)
        #expect(plan(Self.send(nil), index).count == 3)
        #expect(plan(Self.send(nil, installation: "old"), index).isEmpty)
    }

    @Test("native sends go as they are, one per installation")
    func native() {
        let index = Self.index([Self.installation("i1", tags: ["A"]), Self.installation("i2", tags: ["B"])])
        var resolver = TargetResolver()
        let plans = resolver.plan(Self.send("A", format: .native, body: #"{"x":1}"#), index: index, now: Self.now)
        #expect(plans.map(\.deliveryId) == ["n/i1/native"])
        #expect(plans.first?.payload == #"{"x":1}"#)
        #expect(plans.first?.template == nil)
    }

    @Test("a delivery id is its notification, installation and template, joined by slashes, whatever their characters")
    func deliveryIds() {
        #expect(TargetResolver.deliveryId("n", "i", "t") == "n/i/t")
        #expect(TargetResolver.deliveryId("", "", "") == "//")
        let long = String(repeating: "x", count: 300)
        #expect(Array(TargetResolver.deliveryId("01JB\u{E9}", "cafe\u{301}-\u{1F600}", long).utf8) == Array("01JB\u{E9}/cafe\u{301}-\u{1F600}/\(long)".utf8))
        #expect(TargetResolver.deliveryId("a", "b", "c").utf8.count == 5)
    }

    @Test("the rendered payload and an expiry from the template's expiry expression")
    func renderingAndExpiry() {
        let index = Self.index([
            Self.installation("i1", tags: ["A"], templates: [
                "t": InstallationTemplate(body: #"{"aps":{"alert":"$(messageParam)"}}"#, expiry: "$(until)")
            ])
        ])
        var resolver = TargetResolver()
        var notification = Self.send("A")
        notification.send.properties = ["messageParam": "Breaking!", "until": WireDate.format(Self.now.addingTimeInterval(10))]
        let plans = resolver.plan(notification, index: index, now: Self.now)
        #expect(plans.first?.payload == #"{"aps":{"alert":"Breaking!"}}"#)
        #expect(plans.first?.expiresAt == Self.now.addingTimeInterval(10))
        notification.send.properties?["until"] = WireDate.format(Self.now.addingTimeInterval(-10))
        #expect(resolver.plan(notification, index: index, now: Self.now).isEmpty)
    }

    @Test("the index follows changes: upsert moves tags, delete removes")
    func indexChanges() {
        var index = Self.index([Self.installation("i1", tags: ["A"])])
        index.apply(InstallationChanged(change: .upserted, installationId: "i1", installation: Self.installation("i1", tags: ["B"])))
        #expect(plan(Self.send("A"), index).isEmpty)
        #expect(plan(Self.send("B"), index) == ["n/i1/t"])
        index.apply(InstallationChanged(change: .deleted, installationId: "i1"))
        #expect(plan(Self.send("B"), index).isEmpty)
        #expect(index.count == 0)
    }

    @Test("candidates kept in order follow every change, and a copy of the index keeps its own")
    func orderedCandidates() throws {
        func ids(_ index: InstallationIndex, _ expression: String) throws -> [String] {
            index.candidates(for: try TagExpression.parse(expression)).map(\.installationId)
        }
        var index = Self.index([Self.installation("i2", tags: ["A"]), Self.installation("i1", tags: ["A", "B"])])
        #expect(try ids(index, "A") == ["i1", "i2"] && index.all.map(\.installationId) == ["i1", "i2"])
        let before = index
        index.apply(InstallationChanged(change: .upserted, installationId: "i3", installation: Self.installation("i3", tags: ["A"])))
        #expect(try ids(index, "A") == ["i1", "i2", "i3"] && index.all.map(\.installationId) == ["i1", "i2", "i3"])
        #expect(try ids(before, "A") == ["i1", "i2"] && before.all.count == 2, "the copy's lists are still its own")
        index.apply(InstallationChanged(change: .deleted, installationId: "i1"))
        #expect(try ids(index, "A || B") == ["i2", "i3"] && plan(Self.send("B"), index).isEmpty)
        // More expressions than the cache keeps: it starts over, and every answer stays right.
        for n in 0..<(OrderedCandidates.limit + 8) {
            #expect(try ids(index, "A || T\(n)") == ["i2", "i3"])
        }
        index.replace(with: RegistrySnapshot(sequence: 2, installations: [Self.installation("i9", tags: ["A"])]))
        #expect(try ids(index, "A || T1") == ["i9"] && index.all.map(\.installationId) == ["i9"])
    }
}
