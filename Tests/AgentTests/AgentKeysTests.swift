import Auth
import Foundation
import HubProtocol
import Testing

@testable import NHAgent

/// The agent's keyring: it opens a notification encrypted for the user's key, takes the keyring a
/// rotation sealed for this device when a notification is for a key it lacks, and says why when it
/// cannot open one.
@Suite("Agent keys")
struct AgentKeysTests {
    let keys: AgentKeys

    init() throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("nh-agent-keys-\(UUID().uuidString)")
        keys = AgentKeys(store: try AgentStore.open(home: home), device: "laptop")
    }

    static func notification(for key: UserKeyring.Key, _ body: String) throws -> UserNotification {
        let content = try JSONEncoder().encode(AgentKeys.Content(visual: VisualContent(title: "Launch", body: body), raw: "r"))
        let record = try WebPushEncryption.encrypt(content, p256dh: Data(base64URL: key.p256dh)!, auth: Data(base64URL: key.auth)!)
        return UserNotification(
            id: "n-\(body)", appNotificationId: body, userId: "erin", encrypted: record.base64URL, keyId: key.keyId,
            expiresAt: Date().addingTimeInterval(60), createdAt: Date(), modifiedAt: Date())
    }

    static func noFetch() throws -> UserKey { throw HubError(.unavailable, "not asked") }

    @Test("without a keyring a notification stays encrypted, with what to do; with one it is opened, its record kept")
    func opens() throws {
        let keyring = UserKeyring.make(recovery: .generate(), devices: [try keys.deviceEntry()])
        let sealed = try Self.notification(for: keyring.current, "at noon")
        let (unpaired, why) = keys.readable(sealed, fetch: Self.noFetch)
        #expect(unpaired.visual == nil && why?.contains("nh-agent pair") == true)
        try keys.save(keyring)
        let (opened, failure) = keys.readable(sealed, fetch: Self.noFetch)
        #expect(failure == nil)
        #expect(opened.visual == VisualContent(title: "Launch", body: "at noon") && opened.raw == "r")
        #expect(opened.encrypted == sealed.encrypted && opened.keyId == sealed.keyId)
        let plain = UserNotification(
            id: "p", appNotificationId: "p", userId: "erin", visual: VisualContent(title: "t", body: "b"), expiresAt: Date(), createdAt: Date(),
            modifiedAt: Date())
        #expect(keys.readable(plain, fetch: Self.noFetch).0 == plain)
    }

    @Test("a notification for a key this device lacks takes the keyring a rotation sealed for it; one revoked cannot")
    func rotation() throws {
        let keyring = UserKeyring.make(recovery: .generate(), devices: [try keys.deviceEntry()])
        try keys.save(keyring)
        let rotated = keyring.rotated(devices: [try keys.deviceEntry()])
        let point = try keys.deviceKey().publicPoint
        let envelope = try rotated.seal(forPublicKey: point, auth: UserKeyring.deviceAuth(point))
        let current = rotated.current
        let reply = UserKey(
            userId: "erin", keyId: current.keyId, p256dh: current.p256dh, auth: current.auth, refusePlaintext: false, createdAt: Date(),
            envelope: envelope)
        let (opened, failure) = keys.readable(try Self.notification(for: current, "after"), fetch: { reply })
        #expect(failure == nil && opened.visual?.body == "after")
        // The old key is kept: what came before the rotation still opens.
        #expect(keys.readable(try Self.notification(for: keyring.current, "before"), fetch: Self.noFetch).0.visual?.body == "before")
        #expect(try keys.keyring()?.keys.count == 2)

        // Revoked: the next rotation left nothing for this device.
        let next = rotated.rotated(devices: [])
        var revoked = reply
        (revoked.keyId, revoked.p256dh, revoked.auth, revoked.envelope) = (next.current.keyId, next.current.p256dh, next.current.auth, nil)
        let (unread, why) = keys.readable(try Self.notification(for: next.current, "later"), fetch: { revoked })
        #expect(unread.visual == nil && why?.contains("pair it again") == true)
    }
}
