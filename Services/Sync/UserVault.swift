import Auth
import Foundation
import HubProtocol
import ServiceKit

/// A user's encryption key as the sync store keeps it: the public part, the devices that hold the
/// private part (signed by them), the keyring sealed for the recovery key and for devices that
/// have not fetched a rotation yet. Nothing here opens a notification.
struct StoredUserKey: Codable, Equatable {
    var p256dh: String
    var auth: String
    var keyId: String
    var refusePlaintext: Bool
    var createdAt: Date
    var devices: [UserKeyDevice]
    var devicesSignature: String
    var recovery: UserKeyRecovery
    var envelopes: [String: String]

    func reply(userId: String, own: Bool, device: String?) -> UserKey {
        UserKey(
            userId: userId, keyId: keyId, p256dh: p256dh, auth: auth, refusePlaintext: refusePlaintext, createdAt: createdAt,
            devices: own ? devices : nil, devicesSignature: own ? devicesSignature : nil, recovery: own ? recovery : nil,
            envelope: own ? device.flatMap { envelopes[$0] } : nil)
    }
}

/// The requests on a user's key and pairings (`user.key`, `user.key.put`, `user.pairing`), and the
/// check a post makes against the key. The vault's entries are "key" and "pairing/<code>".
struct UserVault {
    let store: any UserNotificationStore
    static let keyEntry = "key"
    static let pairingLifetime: TimeInterval = 600
    /// The most devices a user's key lists.
    static let maxDevices = 100
    static let maxRecordBytes = 65_536

    private let encoder = HubCodec.makeEncoder()
    private let decoder = HubCodec.makeDecoder()

    init(store: any UserNotificationStore) { self.store = store }

    static func noKey(_ userId: String) -> HubError {
        HubError(
            .notFound,
            "user '\(userId)' has no encryption key: one of their devices makes it (nh-agent keys init), and backends then encrypt for it")
    }

    func storedKey(user: String, now: Date = Date()) throws -> StoredUserKey? {
        try store.vaultEntry(user: user, name: Self.keyEntry, now: now).map { try decoder.decode(StoredUserKey.self, from: $0.value) }
    }

    /// Refuses a post that does not fit the user's key: an encrypted one without a key, or for
    /// another key than the current one, and a plaintext one when the user refuses those.
    func checkPost(_ post: PostUserNotification, user: String) throws {
        let key = try storedKey(user: user)
        if post.encrypted != nil {
            guard let key else {
                throw HubError(.preconditionFailed, Self.noKey(post.userId).message)
            }
            guard let keyId = post.keyId else {
                throw HubError(
                    .invalidArgument,
                    "an encrypted post names the key it is for: give keyId, as GET on the user's key answers it (now \(key.keyId))")
            }
            guard keyId == key.keyId else {
                throw HubError(
                    .preconditionFailed,
                    "the record is for key \(keyId), but user '\(post.userId)''s key is now \(key.keyId): fetch the key again and encrypt for it")
            }
        } else {
            guard post.keyId == nil else { throw HubError(.invalidArgument, "keyId goes with encrypted content alone") }
            if key?.refusePlaintext == true {
                throw HubError(
                    .preconditionFailed,
                    "user '\(post.userId)' accepts only notifications encrypted end to end: encrypt for their key (GET on the user's key) and post it as encrypted")
            }
        }
    }

    // MARK: user.key

    func key(user: String, userId: String, own: Bool, device: String?) throws -> UserKey {
        guard let key = try storedKey(user: user) else { throw Self.noKey(userId) }
        return key.reply(userId: userId, own: own, device: device)
    }

    func putKey(_ put: PutUserKey, user: String, userId: String, now: Date = Date()) throws -> UserKey {
        let point = try Self.point(put.p256dh, "p256dh")
        guard Data(base64URL: put.auth)?.count == 16 else { throw HubError(.invalidArgument, "auth must be base64url of 16 bytes") }
        guard (1...Self.maxDevices).contains(put.devices.count) else {
            throw HubError(.invalidArgument, "devices lists the 1 to \(Self.maxDevices) devices that hold the key")
        }
        for device in put.devices {
            try UserNotificationRules.identifier(device.device, "device")
            _ = try Self.point(device.publicKey, "the publicKey of device '\(device.device)'")
        }
        guard Set(put.devices.map(\.device)).count == put.devices.count else { throw HubError(.invalidArgument, "devices lists a device twice") }
        guard Data(base64URL: put.devicesSignature)?.count == 64 else {
            throw HubError(.invalidArgument, "devicesSignature must be base64url of a 64-byte ES256 signature")
        }
        _ = try Self.point(put.recovery.publicKey, "recovery.publicKey")
        guard Data(base64URL: put.recovery.auth)?.count == 16 else { throw HubError(.invalidArgument, "recovery.auth must be base64url of 16 bytes") }
        try Self.record(put.recovery.record, "recovery.record")
        let listed = Set(put.devices.map(\.device))
        for (device, envelope) in put.envelopes ?? [:] {
            guard listed.contains(device) else {
                throw HubError(.invalidArgument, "envelopes has one for device '\(device)', which devices does not list")
            }
            try Self.record(envelope, "the envelope for device '\(device)'")
        }
        let keyId = UserKeyring.keyId(p256dh: point)
        let stored = try store.vault(user: user, name: Self.keyEntry, now: now) { entry -> StoredUserKey in
            let current = try entry.map { try decoder.decode(StoredUserKey.self, from: $0.value) }
            guard put.replaces == current?.keyId else {
                if let current {
                    throw HubError(
                        .preconditionFailed,
                        "user '\(userId)''s key is \(current.keyId), not \(put.replaces ?? "none"): give replaces: \(current.keyId) to change it")
                }
                throw HubError(.preconditionFailed, "user '\(userId)' has no key yet: leave replaces out")
            }
            let sameKey = current?.p256dh == put.p256dh
            // The same key again changes its devices (a device paired); envelopes not yet fetched stay.
            let kept = sameKey ? (current?.envelopes ?? [:]).filter { listed.contains($0.key) } : [:]
            let next = StoredUserKey(
                p256dh: put.p256dh, auth: put.auth, keyId: keyId, refusePlaintext: put.refusePlaintext ?? current?.refusePlaintext ?? false,
                createdAt: sameKey ? current?.createdAt ?? now : now, devices: put.devices, devicesSignature: put.devicesSignature,
                recovery: put.recovery, envelopes: kept.merging(put.envelopes ?? [:]) { $1 })
            entry = VaultEntry(value: try encoder.encode(next), expiresAt: nil)
            return next
        }
        return stored.reply(userId: userId, own: true, device: nil)
    }

    // MARK: user.pairing

    func pairing(_ request: UserPairingRequest, user: String, now: Date = Date()) throws -> UserPairing {
        if request.step == .open {
            guard let commitment = request.commitment, Data(base64URL: commitment)?.count == 32 else {
                throw HubError(.invalidArgument, "open a pairing with commitment: base64url of the SHA-256 of the new device's ephemeral public key")
            }
            for _ in 0..<10 {
                let number = Crypto.randomBytes(4).reduce(0) { $0 << 8 | Int($1) } % 100_000_000
                let digits = String(format: "%08d", number)
                let code = "\(digits.prefix(4))-\(digits.suffix(4))"
                let opened: UserPairing? = try store.vault(user: user, name: "pairing/" + code, now: now) { entry in
                    guard entry == nil else { return nil }
                    let pairing = UserPairing(code: code, expiresAt: now.addingTimeInterval(Self.pairingLifetime), commitment: commitment)
                    entry = VaultEntry(value: try encoder.encode(pairing), expiresAt: pairing.expiresAt)
                    return pairing
                }
                if let opened { return opened }
            }
            throw HubError(.unavailable, "no free pairing code; try again")
        }
        guard let code = request.code, code.count == 9 else {
            throw HubError(.invalidArgument, "give the pairing's code, as the new device shows it (1234-5678)")
        }
        return try store.vault(user: user, name: "pairing/" + code, now: now) { entry in
            guard let stored = entry else {
                throw HubError(.notFound, "no pairing '\(code)' for this user: it expired (they last 10 minutes) or the code is mistyped")
            }
            var pairing = try decoder.decode(UserPairing.self, from: stored.value)
            switch request.step {
            case .open, .get:
                return pairing
            case .answer:
                guard pairing.answerKey == nil else { throw HubError(.conflict, "pairing \(code) was answered already by another device") }
                pairing.answerKey = try Self.point(request.publicKey ?? "", "publicKey").base64URL
            case .reveal:
                guard pairing.answerKey != nil else { throw HubError(.conflict, "pairing \(code) has no answer yet; reveal after it") }
                guard pairing.revealKey == nil else { throw HubError(.conflict, "pairing \(code) was revealed already") }
                // The device that answered checks the key against the commitment it read: the hub
                // only relays.
                let point = try Self.point(request.publicKey ?? "", "publicKey")
                guard let device = request.device else { throw HubError(.invalidArgument, "reveal with device: this device's id and public key") }
                try UserNotificationRules.identifier(device.device, "device")
                _ = try Self.point(device.publicKey, "device.publicKey")
                pairing.revealKey = point.base64URL
                pairing.device = device
            case .deliver:
                guard pairing.revealKey != nil else { throw HubError(.conflict, "pairing \(code) has not been revealed yet") }
                guard pairing.sealed == nil else { throw HubError(.conflict, "pairing \(code) was delivered already") }
                guard let sealed = request.sealed, let bytes = Data(base64URL: sealed), bytes.count > 28, bytes.count <= Self.maxRecordBytes else {
                    throw HubError(.invalidArgument, "deliver with sealed: base64url of the keyring sealed for the new device")
                }
                pairing.sealed = sealed
            }
            entry = VaultEntry(value: try encoder.encode(pairing), expiresAt: stored.expiresAt)
            return pairing
        }
    }

    // MARK: checks

    /// The 65-byte point of a P-256 public key given as base64url.
    static func point(_ text: String, _ name: String) throws(HubError) -> Data {
        guard let point = Data(base64URL: text), (try? P256Key(publicPoint: point)) != nil else {
            throw HubError(.invalidArgument, "\(name) must be base64url of a P-256 public key, 65 bytes starting 0x04, on the curve")
        }
        return point
    }

    static func record(_ text: String, _ name: String) throws(HubError) {
        do {
            try EncryptedRecord.check(text)
        } catch {
            throw HubError(error.code, "\(name): \(error.message)")
        }
    }
}
