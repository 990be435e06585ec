import Auth
import Foundation
import HubProtocol
import TestSupport
import Testing

@testable import NHSync

/// The user's key and pairings as the sync store keeps and relays them, on each engine.
@Suite("User vault")
struct UserVaultTests {
    static func put(_ keyring: UserKeyring, replaces: String?, refusePlaintext: Bool? = nil, envelopes: [String: String]? = nil) throws -> PutUserKey {
        let recovery = UserKeyRecovery(
            publicKey: keyring.recoveryPublicKey, auth: keyring.recoveryAuth,
            record: try keyring.seal(forPublicKey: Data(base64URL: keyring.recoveryPublicKey)!, auth: Data(base64URL: keyring.recoveryAuth)!))
        return PutUserKey(
            p256dh: keyring.current.p256dh, auth: keyring.current.auth, replaces: replaces, refusePlaintext: refusePlaintext,
            devices: keyring.devices.map { UserKeyDevice(device: $0.device, publicKey: $0.publicKey) }, devicesSignature: try keyring.signDevices(),
            envelopes: envelopes, recovery: recovery)
    }

    static func code(_ body: () throws -> Any) -> ErrorCode? { errorCode(of: body) }

    static let device = UserKeyring.DeviceEntry(device: "laptop", publicKey: UserKeyring.newKey().key.publicPoint.base64URL)

    @Test("a key is set once, changed only by naming the one it replaces; posts must name the current key", arguments: StoreEngine.available)
    func key(_ engine: StoreEngine) throws {
        let vault = UserVault(store: try engine.makeStore())
        let encrypted = PostUserNotification(userId: "erin", appNotificationId: "a", encrypted: EncryptedRecordTests.record(), keyId: "x")
        #expect(Self.code { try vault.key(user: "erin", userId: "erin", own: false, device: nil) } == .notFound)
        #expect(Self.code { try vault.checkPost(encrypted, user: "erin") } == .preconditionFailed)
        let keyring = UserKeyring.make(recovery: .generate(), devices: [Self.device])
        #expect(Self.code { try vault.putKey(try Self.put(keyring, replaces: "nothing"), user: "erin", userId: "erin") } == .preconditionFailed)
        let first = try vault.putKey(try Self.put(keyring, replaces: nil), user: "erin", userId: "erin")
        #expect(first.keyId == keyring.current.keyId && first.devices?.count == 1)
        let public_ = try vault.key(user: "erin", userId: "erin", own: false, device: nil)
        #expect(public_.p256dh == keyring.current.p256dh && public_.devices == nil && public_.recovery == nil)
        #expect(Self.code { try vault.putKey(try Self.put(keyring, replaces: nil), user: "erin", userId: "erin") } == .preconditionFailed)

        var post = encrypted
        #expect(Self.code { try vault.checkPost(post, user: "erin") } == .preconditionFailed)
        post.keyId = nil
        #expect(Self.code { try vault.checkPost(post, user: "erin") } == .invalidArgument)
        post.keyId = first.keyId
        #expect(Self.code { try vault.checkPost(post, user: "erin") } == nil)
        let plain = PostUserNotification(userId: "erin", appNotificationId: "b", visual: VisualContent(title: "t", body: "b"))
        #expect(Self.code { try vault.checkPost(plain, user: "erin") } == nil)

        // A rotation that refuses plaintext, with an envelope for the one other device.
        let phone = UserKeyring.DeviceEntry(device: "phone", publicKey: UserKeyring.newKey().key.publicPoint.base64URL)
        let rotated = keyring.rotated(devices: [Self.device, phone])
        let envelope = try rotated.seal(forPublicKey: Data(base64URL: phone.publicKey)!, auth: UserKeyring.deviceAuth(Data(base64URL: phone.publicKey)!))
        let second = try vault.putKey(
            try Self.put(rotated, replaces: first.keyId, refusePlaintext: true, envelopes: ["phone": envelope]), user: "erin", userId: "erin")
        #expect(second.keyId != first.keyId && second.refusePlaintext)
        #expect(Self.code { try vault.checkPost(plain, user: "erin") } == .preconditionFailed)
        #expect(Self.code { try vault.checkPost(post, user: "erin") } == .preconditionFailed)
        #expect(try vault.key(user: "erin", userId: "erin", own: true, device: "phone").envelope == envelope)
        #expect(try vault.key(user: "erin", userId: "erin", own: true, device: "laptop").envelope == nil)
        // Another user's key is their own.
        #expect(Self.code { try vault.key(user: "frank", userId: "frank", own: false, device: nil) } == .notFound)
    }

    @Test("bad keys are refused with what to fix", arguments: StoreEngine.available)
    func refusals(_ engine: StoreEngine) throws {
        let vault = UserVault(store: try engine.makeStore())
        var put = try Self.put(UserKeyring.make(recovery: .generate(), devices: [Self.device]), replaces: nil)
        put.p256dh = "BAAA"
        #expect(Self.code { try vault.putKey(put, user: "erin", userId: "erin") } == .invalidArgument)
        put = try Self.put(UserKeyring.make(recovery: .generate(), devices: [Self.device]), replaces: nil)
        put.envelopes = ["stranger": put.recovery.record]
        #expect(Self.code { try vault.putKey(put, user: "erin", userId: "erin") } == .invalidArgument)
        put.envelopes = nil
        put.recovery.record = "not a record"
        #expect(Self.code { try vault.putKey(put, user: "erin", userId: "erin") } == .invalidPayload)
    }

    @Test("a pairing goes open, answer, reveal, deliver, each once, and expires", arguments: StoreEngine.available)
    func pairing(_ engine: StoreEngine) throws {
        let vault = UserVault(store: try engine.makeStore())
        let point = { UserKeyring.newKey().key.publicPoint }
        let reveal = point()
        let now = Date()
        let opened = try vault.pairing(UserPairingRequest(step: .open, commitment: Pairing.commitment(reveal)), user: "erin", now: now)
        #expect(opened.code.count == 9)
        let code = opened.code
        #expect(Self.code { try vault.pairing(UserPairingRequest(step: .get, code: code), user: "frank", now: now) } == .notFound)
        #expect(Self.code { try vault.pairing(UserPairingRequest(step: .deliver, code: code, sealed: "c2VhbGVkLXNlYWxlZC1zZWFsZWQtc2VhbGVkLXNlYWxlZA"), user: "erin", now: now) } == .conflict)
        _ = try vault.pairing(UserPairingRequest(step: .answer, code: code, publicKey: point().base64URL), user: "erin", now: now)
        #expect(Self.code { try vault.pairing(UserPairingRequest(step: .answer, code: code, publicKey: point().base64URL), user: "erin", now: now) } == .conflict)
        let device = UserKeyDevice(device: "phone", publicKey: point().base64URL)
        _ = try vault.pairing(UserPairingRequest(step: .reveal, code: code, publicKey: reveal.base64URL, device: device), user: "erin", now: now)
        let sealed = Data(repeating: 7, count: 60).base64URL
        let delivered = try vault.pairing(UserPairingRequest(step: .deliver, code: code, sealed: sealed), user: "erin", now: now)
        #expect(delivered.sealed == sealed && delivered.device == device && delivered.revealKey == reveal.base64URL)
        let later = now.addingTimeInterval(UserVault.pairingLifetime + 1)
        #expect(Self.code { try vault.pairing(UserPairingRequest(step: .get, code: code), user: "erin", now: later) } == .notFound)
    }
}
