import Foundation
import HubProtocol

/// What a user's devices hold to read notifications encrypted end to end for the user, and what
/// they hand each other: every key the user has had (old notifications stay readable after a
/// rotation), the key that signs the list of the user's devices, and the recovery key's public
/// part, for which a rotation seals the new keyring. The hub never holds it unsealed.
public struct UserKeyring: Codable, Sendable, Equatable {
    public struct Key: Codable, Sendable, Equatable {
        /// base64url of the 32-byte private scalar.
        public var privateKey: String
        /// base64url of the 65-byte public point.
        public var p256dh: String
        /// base64url of the 16-byte auth secret.
        public var auth: String
        public var createdAt: Date
        public var keyId: String { UserKeyring.keyId(p256dh: Data(base64URL: p256dh) ?? Data()) }
    }

    /// Oldest first; the last is the current one.
    public var keys: [Key]
    /// base64url of the private scalar of the key that signs the device list (`devicesSignature`).
    public var signingKey: String
    /// The devices that hold this keyring, as the device that sealed it knew them.
    public var devices: [DeviceEntry]
    public var recoveryPublicKey: String
    public var recoveryAuth: String

    /// A device's id, name and own public key: the protocol's `UserKeyDevice`.
    public typealias DeviceEntry = UserKeyDevice

    public init(keys: [Key], signingKey: String, devices: [DeviceEntry], recoveryPublicKey: String, recoveryAuth: String) {
        self.keys = keys
        self.signingKey = signingKey
        self.devices = devices
        self.recoveryPublicKey = recoveryPublicKey
        self.recoveryAuth = recoveryAuth
    }

    public var current: Key { keys[keys.count - 1] }

    /// A key's id: base64url of the first 12 bytes of SHA-256 of its 65-byte public point.
    public static func keyId(p256dh: Data) -> String { Data(Crypto.sha256(p256dh).prefix(12)).base64URL }

    /// A new P-256 key and its private scalar.
    public static func newKey() -> (scalar: Data, key: P256Key) {
        while true {
            let scalar = Crypto.randomBytes(32)
            if let key = try? P256Key(privateScalar: scalar) { return (scalar, key) }
        }
    }

    /// A new keyring: a first user key, a signing key, for the recovery key given.
    public static func make(recovery: RecoveryKey, devices: [DeviceEntry], now: Date = Date()) -> UserKeyring {
        UserKeyring(
            keys: [newUserKey(now: now)], signingKey: newKey().scalar.base64URL, devices: devices,
            recoveryPublicKey: recovery.key.publicPoint.base64URL, recoveryAuth: recovery.auth.base64URL)
    }

    static func newUserKey(now: Date) -> Key {
        let (scalar, key) = newKey()
        // Whole seconds, as the keyring's ISO 8601 dates keep them.
        let createdAt = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        return Key(privateKey: scalar.base64URL, p256dh: key.publicPoint.base64URL, auth: Crypto.randomBytes(16).base64URL, createdAt: createdAt)
    }

    /// The keyring after a rotation: a new current key and a new signing key, for `devices`. A
    /// device left out of `devices` keeps what it had and gets nothing new.
    public func rotated(devices: [DeviceEntry], now: Date = Date()) -> UserKeyring {
        var next = self
        next.keys.append(Self.newUserKey(now: now))
        next.signingKey = Self.newKey().scalar.base64URL
        next.devices = devices
        return next
    }

    /// This keyring with the keys of `other` it lacks (a keyring a rotation sealed for this device
    /// is newer: its current key, signing key and devices win).
    public func merged(newer other: UserKeyring) -> UserKeyring {
        var merged = other
        let known = Set(other.keys.map(\.p256dh))
        merged.keys = (keys.filter { !known.contains($0.p256dh) } + other.keys).sorted { $0.createdAt < $1.createdAt }
        // The newer keyring's current key stays the last one.
        if let index = merged.keys.firstIndex(of: other.current) {
            merged.keys.append(merged.keys.remove(at: index))
        }
        return merged
    }

    public func key(id: String) -> Key? { keys.last { $0.keyId == id } }

    /// The plaintext of an aes128gcm record for one of these keys: `keyId`'s when given, else each in turn.
    public func open(_ record: Data, keyId: String?) throws(PushCryptoError) -> Data {
        let candidates = keyId.map { id in keys.filter { $0.keyId == id } } ?? keys.reversed()
        guard !candidates.isEmpty else {
            throw PushCryptoError("the notification is encrypted for key \(keyId ?? "?"), which this device does not hold: pair it again (nh-agent pair)")
        }
        var last = PushCryptoError("no key")
        for key in candidates {
            do {
                guard let scalar = Data(base64URL: key.privateKey), let auth = Data(base64URL: key.auth) else { continue }
                return try WebPushEncryption.decrypt(record, subscriber: try P256Key(privateScalar: scalar), auth: auth)
            } catch {
                last = error
            }
        }
        throw last
    }

    // MARK: The device list, signed

    /// What the signing key signs: the current key's id and each device, sorted.
    public static func devicesMessage(keyId: String, devices: [DeviceEntry]) -> Data {
        let lines = devices.map { "\($0.device) \($0.publicKey)" }.sorted()
        return Data((["nh-user-devices-1", keyId] + lines).joined(separator: "\n").utf8)
    }

    public func signDevices() throws(PushCryptoError) -> String {
        guard let scalar = Data(base64URL: signingKey) else { throw PushCryptoError("the keyring's signing key is not base64url") }
        return try P256Key(privateScalar: scalar).signES256(Self.devicesMessage(keyId: current.keyId, devices: devices)).base64URL
    }

    /// True when `signature` is this keyring's signing key's, over `devices` for its current key.
    public func verifyDevices(_ devices: [DeviceEntry], signature: String) -> Bool {
        guard let scalar = Data(base64URL: signingKey), let key = try? P256Key(privateScalar: scalar),
            let signature = Data(base64URL: signature)
        else { return false }
        return key.verifyES256(signature, for: Self.devicesMessage(keyId: current.keyId, devices: devices))
    }

    // MARK: Sealing for a device, or for the recovery key

    /// The keyring as an RFC 8291 record for a device key (its auth secret derived from the point:
    /// the point is all a device publishes) or for the recovery key.
    public func seal(forPublicKey point: Data, auth: Data) throws(PushCryptoError) -> String {
        let plaintext: Data
        do {
            plaintext = try Self.encoder.encode(self)
        } catch {
            throw PushCryptoError("the keyring cannot be written: \(error)")
        }
        return try WebPushEncryption.encrypt(plaintext, p256dh: point, auth: auth, recordSize: plaintext.count + 103).base64URL
    }

    public static func open(sealed text: String, key: P256Key, auth: Data) throws(PushCryptoError) -> UserKeyring {
        guard let record = Data(base64URL: text) else { throw PushCryptoError("the sealed keyring is not base64url") }
        let plaintext = try WebPushEncryption.decrypt(record, subscriber: key, auth: auth)
        do {
            return try decoder.decode(UserKeyring.self, from: plaintext)
        } catch {
            throw PushCryptoError("the sealed keyring opened but is not a keyring: \(error)")
        }
    }

    /// A device key's auth secret, derived from its public point.
    public static func deviceAuth(_ point: Data) -> Data { Data(Crypto.sha256(Data("nh-device-auth".utf8) + point).prefix(16)) }

    public static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()
    public static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()
}

/// The recovery key: 32 random bytes a person writes down, shown as 13 groups of 4 base32
/// characters. It derives a P-256 key and an auth secret; the hub keeps the keyring sealed for them.
public struct RecoveryKey: Sendable {
    public let secret: Data
    public let key: P256Key
    public let auth: Data

    public init(secret: Data) throws(PushCryptoError) {
        guard secret.count == 32 else { throw PushCryptoError("a recovery key is 32 bytes, not \(secret.count)") }
        self.secret = secret
        var counter: UInt8 = 0
        while true {
            let scalar = HKDF.sha256(salt: Data(), ikm: secret, info: Data("nh-recovery-key".utf8) + [counter], length: 32)
            if let key = try? P256Key(privateScalar: scalar) {
                self.key = key
                break
            }
            counter &+= 1
        }
        auth = HKDF.sha256(salt: Data(), ikm: secret, info: Data("nh-recovery-auth".utf8), length: 16)
    }

    public static func generate() -> RecoveryKey {
        // 32 random bytes always derive a key.
        try! RecoveryKey(secret: Crypto.randomBytes(32))
    }

    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")

    /// "ABCD-EFGH-…": base32 (RFC 4648) in groups of four.
    public var text: String {
        var bits = 0
        var value = 0
        var characters: [Character] = []
        for byte in secret {
            value = value << 8 | Int(byte)
            bits += 8
            while bits >= 5 {
                characters.append(Self.alphabet[(value >> (bits - 5)) & 31])
                bits -= 5
            }
        }
        if bits > 0 { characters.append(Self.alphabet[(value << (5 - bits)) & 31]) }
        return stride(from: 0, to: characters.count, by: 4).map { String(characters[$0..<min($0 + 4, characters.count)]) }
            .joined(separator: "-")
    }

    /// Reads what `text` printed, without regard to case, dashes or spaces.
    public init(text: String) throws(PushCryptoError) {
        var bits = 0
        var value = 0
        var bytes = Data()
        for character in text.uppercased() where character != "-" && character != " " {
            guard let index = Self.alphabet.firstIndex(of: character) else {
                throw PushCryptoError("a recovery key has only A–Z and 2–7 (and dashes); '\(character)' is not one of them")
            }
            value = (value << 5 | index) & 0xFFFF
            bits += 5
            if bits >= 8 {
                bytes.append(UInt8((value >> (bits - 8)) & 0xFF))
                bits -= 8
            }
        }
        guard bytes.count == 32 else {
            throw PushCryptoError("a recovery key is 52 characters (13 groups of 4); this one reads as \(bytes.count) bytes, not 32")
        }
        try self.init(secret: bytes)
    }
}

/// The cryptography of pairing a new device with one that holds the keyring. The new device
/// commits to its ephemeral key first, so that neither a device nor the hub between them can choose
/// a key after seeing the other's; both then compute the same six-digit confirmation string from
/// the ECDH secret and every key exchanged, and a key swapped on the way makes the strings differ.
public enum Pairing {
    public static func commitment(_ publicKey: Data) -> String { Crypto.sha256(publicKey).base64URL }

    /// The confirmation string and the key that seals the keyring, from one side's ephemeral key and
    /// the other's public point; `answerKey` is the holding device's, `revealKey` the new device's.
    public static func derive(
        own: P256Key, peer: Data, answerKey: Data, revealKey: Data, device: UserKeyring.DeviceEntry
    ) throws(PushCryptoError) -> (confirmation: String, sealKey: Data) {
        let shared = try own.sharedSecret(with: try P256Key(publicPoint: peer))
        let transcript = Data("nh-pairing-1".utf8) + answerKey + revealKey + Data("\(device.device) \(device.publicKey)".utf8)
        let bytes = HKDF.sha256(salt: transcript, ikm: shared, info: Data("confirmation".utf8), length: 4)
        let number = bytes.reduce(0) { $0 << 8 | Int($1) } % 1_000_000
        let digits = String(format: "%06d", number)
        let confirmation = "\(digits.prefix(3)) \(digits.suffix(3))"
        return (confirmation, HKDF.sha256(salt: transcript, ikm: shared, info: Data("seal".utf8), length: 16))
    }

    /// nonce (12) || AES-128-GCM of the keyring.
    public static func seal(_ keyring: UserKeyring, key: Data) throws(PushCryptoError) -> String {
        let nonce = Crypto.randomBytes(12)
        let plaintext: Data
        do {
            plaintext = try UserKeyring.encoder.encode(keyring)
        } catch {
            throw PushCryptoError("the keyring cannot be written: \(error)")
        }
        return (nonce + (try AESGCM.seal128(key: key, nonce: nonce, plaintext: plaintext))).base64URL
    }

    public static func open(_ sealed: String, key: Data) throws(PushCryptoError) -> UserKeyring {
        guard let bytes = Data(base64URL: sealed), bytes.count > 28 else { throw PushCryptoError("the sealed keyring is not one") }
        let plaintext = try AESGCM.open128(key: key, nonce: bytes.prefix(12), sealed: bytes.dropFirst(12))
        do {
            return try UserKeyring.decoder.decode(UserKeyring.self, from: plaintext)
        } catch {
            throw PushCryptoError("the sealed keyring opened but is not a keyring: \(error)")
        }
    }
}
