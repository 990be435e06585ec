import Foundation
import Testing

@testable import Auth

/// The cryptography of keys encrypted end to end: pairing, sealing, recovery, rotation, and the
/// signed device list, as both sides of each run it.
@Suite("User keyring")
struct UserKeyringTests {
    static let laptop = UserKeyring.DeviceEntry(device: "laptop", publicKey: UserKeyring.newKey().key.publicPoint.base64URL)
    static let phone = UserKeyring.DeviceEntry(device: "phone", publicKey: UserKeyring.newKey().key.publicPoint.base64URL)

    @Test("both sides of a pairing derive the same confirmation and seal key; a key swapped on the way changes both")
    func pairing() throws {
        let (holder, fresh, hostile) = (UserKeyring.newKey().key, UserKeyring.newKey().key, UserKeyring.newKey().key)
        let (a, b) = (holder.publicPoint, fresh.publicPoint)
        let atHolder = try Pairing.derive(own: holder, peer: b, answerKey: a, revealKey: b, device: Self.phone)
        let atNew = try Pairing.derive(own: fresh, peer: a, answerKey: a, revealKey: b, device: Self.phone)
        #expect(atHolder.confirmation == atNew.confirmation)
        #expect(atHolder.sealKey == atNew.sealKey)
        #expect(atHolder.confirmation.count == 7)
        // The hub gives the holder its own key for the new device's: the strings differ.
        let fooled = try Pairing.derive(own: holder, peer: hostile.publicPoint, answerKey: a, revealKey: hostile.publicPoint, device: Self.phone)
        #expect(fooled.confirmation != atNew.confirmation)
        // The hub swaps the device key the new device reveals: the transcript differs.
        let swapped = try Pairing.derive(own: holder, peer: b, answerKey: a, revealKey: b, device: Self.laptop)
        #expect(swapped.confirmation != atNew.confirmation)
        // The commitment binds the key revealed.
        #expect(Pairing.commitment(b) != Pairing.commitment(hostile.publicPoint))

        let keyring = UserKeyring.make(recovery: .generate(), devices: [Self.laptop, Self.phone])
        let sealed = try Pairing.seal(keyring, key: atHolder.sealKey)
        #expect(try Pairing.open(sealed, key: atNew.sealKey) == keyring)
        #expect(throws: PushCryptoError.self) { try Pairing.open(sealed, key: fooled.sealKey) }
    }

    @Test("the recovery key reads back from its text and opens the keyring sealed for it; another does not")
    func recovery() throws {
        let recovery = RecoveryKey.generate()
        let text = recovery.text
        #expect(text.split(separator: "-").count == 13)
        let read = try RecoveryKey(text: text.lowercased().replacingOccurrences(of: "-", with: " "))
        #expect(read.secret == recovery.secret && read.key.publicPoint == recovery.key.publicPoint && read.auth == recovery.auth)
        #expect(throws: PushCryptoError.self) { try RecoveryKey(text: "ABCD-1") }
        let keyring = UserKeyring.make(recovery: recovery, devices: [Self.laptop])
        let sealed = try keyring.seal(forPublicKey: recovery.key.publicPoint, auth: recovery.auth)
        #expect(try UserKeyring.open(sealed: sealed, key: read.key, auth: read.auth) == keyring)
        let other = RecoveryKey.generate()
        #expect(throws: PushCryptoError.self) { try UserKeyring.open(sealed: sealed, key: other.key, auth: other.auth) }
    }

    @Test("after a rotation the keyring opens records for the old key and the new; a device left out cannot open the new keyring")
    func rotation() throws {
        let keyring = UserKeyring.make(recovery: .generate(), devices: [Self.laptop, Self.phone])
        let old = keyring.current
        let rotated = keyring.rotated(devices: [Self.laptop])
        #expect(rotated.keys.count == 2 && rotated.current != old && rotated.signingKey != keyring.signingKey)
        let record = { (key: UserKeyring.Key, text: String) in
            try WebPushEncryption.encrypt(Data(text.utf8), p256dh: Data(base64URL: key.p256dh)!, auth: Data(base64URL: key.auth)!)
        }
        #expect(try rotated.open(try record(old, "before"), keyId: old.keyId) == Data("before".utf8))
        #expect(try rotated.open(try record(rotated.current, "after"), keyId: nil) == Data("after".utf8))
        #expect(throws: PushCryptoError.self) { try keyring.open(try record(rotated.current, "after"), keyId: rotated.current.keyId) }
        // Sealed for the laptop's device key: the laptop opens it, the phone's key does not.
        let (laptopScalar, laptopKey) = UserKeyring.newKey()
        let (_, phoneKey) = UserKeyring.newKey()
        let envelope = try rotated.seal(forPublicKey: laptopKey.publicPoint, auth: UserKeyring.deviceAuth(laptopKey.publicPoint))
        let opened = try UserKeyring.open(sealed: envelope, key: try P256Key(privateScalar: laptopScalar), auth: UserKeyring.deviceAuth(laptopKey.publicPoint))
        #expect(keyring.merged(newer: opened) == rotated)
        #expect(throws: PushCryptoError.self) {
            try UserKeyring.open(sealed: envelope, key: phoneKey, auth: UserKeyring.deviceAuth(laptopKey.publicPoint))
        }
    }

    @Test("the device list verifies with the keyring that signed it, and not once a device is added by someone else")
    func devices() throws {
        let keyring = UserKeyring.make(recovery: .generate(), devices: [Self.laptop, Self.phone])
        let signature = try keyring.signDevices()
        #expect(keyring.verifyDevices([Self.phone, Self.laptop], signature: signature))
        let stranger = UserKeyring.DeviceEntry(device: "stranger", publicKey: UserKeyring.newKey().key.publicPoint.base64URL)
        #expect(!keyring.verifyDevices([Self.laptop, Self.phone, stranger], signature: signature))
        #expect(!keyring.rotated(devices: [Self.laptop, Self.phone]).verifyDevices([Self.laptop, Self.phone], signature: signature))
    }
}
