import Foundation
import HubProtocol
import Tags
import Testing

@testable import DispatchCore

/// The index keeps installations in slots and columns: what goes in comes out the same (but the
/// registry's own times), through every change, with what is shared kept once.
@Suite("Installation index")
struct InstallationIndexTests {
    static func installation(_ id: String, tags: [String] = [], channel: String? = nil, platform: String = "linux", user: String? = nil)
        -> Installation
    {
        Installation(installationId: id, platform: platform, pushChannel: channel ?? "channel-of-\(id)-\(String(repeating: "k", count: 30))",
                     tags: tags, userId: user)
    }

    static func change(_ installation: Installation) -> InstallationChanged {
        InstallationChanged(change: .upserted, installationId: installation.installationId, installation: installation)
    }

    @Test("an installation comes out as it went in, every field the dispatcher reads kept, its times left to the registry")
    func roundTrip() {
        var full = Self.installation("a", tags: ["World", "Sports"], platform: "fcmv1", user: "alice")
        full.templates = ["t": InstallationTemplate(body: #"{"m":"$(m)"}"#, expiry: "$(e)", tags: ["Extra"], headers: ["X-A": "1"])]
        full.expirationTime = Date(timeIntervalSince1970: 1_900_000_000.5)
        full.version = 42
        full.endpoints = ["e": PushEndpoint(vapid: "v")]
        full.pushChannelObject = true
        full.createdAt = Date(timeIntervalSince1970: 1)
        full.lastSeen = Date(timeIntervalSince1970: 2)
        var odd = Self.installation("b", platform: "SomethingElse")
        odd.pushChannel = "ü-channel-" + String(repeating: "é", count: 40)
        var index = InstallationIndex()
        index.replace(with: RegistrySnapshot(sequence: 1, installations: [full, odd]))
        var expected = full
        (expected.createdAt, expected.lastSeen) = (nil, nil)
        #expect(index.installation("a") == expected)
        #expect(index.installation("a")?.etag == "42")
        #expect(index.installation("b") == odd)
        #expect(index.installation("c") == nil && index.count == 2)
    }

    @Test("changes, deletions and slots taken again keep every list right: tags, templates' tags, users and hubs")
    func churn() throws {
        var index = InstallationIndex()
        for i in 0..<200 {
            index.apply(Self.change(Self.installation("i\(i)", tags: ["T\(i % 3)"], user: i % 2 == 0 ? "even" : nil)))
        }
        // Every third one deleted, every fifth moved to another tag; new ones take the freed slots.
        for i in stride(from: 0, to: 200, by: 3) { index.apply(InstallationChanged(change: .deleted, installationId: "i\(i)")) }
        for i in stride(from: 1, to: 200, by: 5) where i % 3 != 0 {
            index.apply(Self.change(Self.installation("i\(i)", tags: ["Moved"], channel: "moved-\(i)")))
        }
        for i in 200..<230 { index.apply(Self.change(Self.installation("news/i\(i)", tags: ["T0"], user: "even"))) }
        let live = (0..<200).filter { $0 % 3 != 0 }
        let moved = Set(stride(from: 1, to: 200, by: 5).filter { $0 % 3 != 0 })
        func ids(_ expression: String, hub: String? = nil) throws -> [String] {
            index.candidates(for: try TagExpression.parsed(expression), in: HubScope(named: hub)).map(\.installationId)
        }
        #expect(try ids("T1") == live.filter { $0 % 3 == 1 && !moved.contains($0) }.map { "i\($0)" }.sorted())
        #expect(try ids("Moved") == moved.map { "i\($0)" }.sorted())
        #expect(try ids("T0", hub: "news") == (200..<230).map { "news/i\($0)" })
        #expect(try ids("T0") == [])
        #expect(index.installations(ofUser: "even").map(\.installationId)
                == live.filter { $0 % 2 == 0 && !moved.contains($0) }.map { "i\($0)" }.sorted())
        #expect(index.installations(ofUser: "news/even").count == 30)
        #expect(index.all.count == live.count && index.everyone(in: HubScope(named: "news")).count == 30)
        #expect(index.count == live.count + 30 && index.hubCount == 2)
        for i in moved { #expect(index.installation("i\(i)")?.pushChannel == "moved-\(i)") }
        #expect(index.installation("i3") == nil)
    }

    @Test("a million changes to one installation keep its channel buffer small: what freed slots left is written out")
    func channelsCompacted() {
        var index = InstallationIndex()
        for round in 0..<20_000 {
            index.apply(Self.change(Self.installation("only", tags: ["T"], channel: "channel-\(round)-" + String(repeating: "x", count: 40))))
        }
        #expect(index.installation("only")?.pushChannel == "channel-19999-" + String(repeating: "x", count: 40))
        #expect(index.channelBytesHeld < 200_000)
    }
}
