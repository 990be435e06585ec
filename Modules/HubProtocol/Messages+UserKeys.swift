import Foundation

/// A device that holds a user's key, as the devices list it for each other: its id (the agent's
/// device id, or the browser's) and its own P-256 public key, base64url of the 65-byte point, to
/// which a rotated key is encrypted for it.
public struct UserKeyDevice: Codable, Sendable, Equatable {
    public var device: String
    public var publicKey: String
    /// What a person calls it ("laptop"), shown when listing and revoking.
    public var name: String?
    public init(device: String, publicKey: String, name: String? = nil) {
        self.device = device
        self.publicKey = publicKey
        self.name = name
    }
}

/// The user's keys sealed for the recovery key: an RFC 8291 record (base64url) for the recovery
/// key's public point and auth secret, which the hub keeps and cannot open.
public struct UserKeyRecovery: Codable, Sendable, Equatable {
    public var publicKey: String
    public var auth: String
    public var record: String
    public init(publicKey: String, auth: String, record: String) {
        self.publicKey = publicKey
        self.auth = auth
        self.record = record
    }
}

/// The user's encryption key. With `userId`, a backend's request (Send right), answered with the
/// public part alone; without it, the user's own (a user token), answered with the devices, the
/// recovery record and, for `device`, the key sealed for that device after a rotation.
public struct UserKeyRequest: HubRequest {
    public typealias Reply = UserKey
    public static let messageType: MessageType = "user.key"
    public var userId: String?
    public var device: String?
    public init(userId: String? = nil, device: String? = nil) {
        self.userId = userId
        self.device = device
    }
}

/// A user's current public key, in the shape of a Web Push subscription's keys: a backend encrypts
/// for it with any Web Push library (RFC 8291, aes128gcm) and posts the record with `keyId`.
public struct UserKey: HubMessage {
    public static let messageType: MessageType = "user.key.reply"
    public var userId: String
    /// base64url of the first 12 bytes of SHA-256 of the 65-byte public point.
    public var keyId: String
    /// base64url of the 65-byte public point.
    public var p256dh: String
    /// base64url of the 16-byte auth secret.
    public var auth: String
    /// True: the hub refuses this user's posts that are not encrypted.
    public var refusePlaintext: Bool
    public var createdAt: Date
    /// The user's own request only.
    public var devices: [UserKeyDevice]?
    /// The devices' list signed by the keyring's signing key (ES256, base64url), which every device
    /// checks before it seals a rotated key for them.
    public var devicesSignature: String?
    public var recovery: UserKeyRecovery?
    /// The keys sealed for the device the request named, when a rotation left one for it.
    public var envelope: String?
    public init(
        userId: String, keyId: String, p256dh: String, auth: String, refusePlaintext: Bool, createdAt: Date,
        devices: [UserKeyDevice]? = nil, devicesSignature: String? = nil, recovery: UserKeyRecovery? = nil, envelope: String? = nil
    ) {
        self.userId = userId
        self.keyId = keyId
        self.p256dh = p256dh
        self.auth = auth
        self.refusePlaintext = refusePlaintext
        self.createdAt = createdAt
        self.devices = devices
        self.devicesSignature = devicesSignature
        self.recovery = recovery
        self.envelope = envelope
    }
}

/// A device of the user (user token) sets the user's key: the first, or a rotation of the one
/// whose id is `replaces`. `devices` are those that hold the new key; `envelopes` hold it sealed for
/// each of them (device → RFC 8291 record for its public key), but the one that sets it.
public struct PutUserKey: HubRequest {
    public typealias Reply = UserKey
    public static let messageType: MessageType = "user.key.put"
    public var p256dh: String
    public var auth: String
    /// The key this one replaces; absent for a user's first key.
    public var replaces: String?
    public var refusePlaintext: Bool?
    public var devices: [UserKeyDevice]
    public var devicesSignature: String
    public var envelopes: [String: String]?
    public var recovery: UserKeyRecovery
    public init(
        p256dh: String, auth: String, replaces: String? = nil, refusePlaintext: Bool? = nil, devices: [UserKeyDevice],
        devicesSignature: String, envelopes: [String: String]? = nil, recovery: UserKeyRecovery
    ) {
        self.devicesSignature = devicesSignature
        self.p256dh = p256dh
        self.auth = auth
        self.replaces = replaces
        self.refusePlaintext = refusePlaintext
        self.devices = devices
        self.envelopes = envelopes
        self.recovery = recovery
    }
}

/// One step of pairing a new device with one that holds the user's key, through the hub, which
/// only relays: the new device opens with a commitment (SHA-256 of its ephemeral public key) and
/// gets a code; the device holding the key answers with its ephemeral public key; the new device
/// reveals its key and its own device key; each shows the confirmation string both compute; the
/// holding device, once the person confirms, delivers the keys sealed for the new device.
public struct UserPairingRequest: HubRequest {
    public typealias Reply = UserPairing
    public static let messageType: MessageType = "user.pairing"
    public enum Step: String, Codable, Sendable, CaseIterable { case open, get, answer, reveal, deliver }
    public var step: Step
    public var code: String?
    public var commitment: String?
    public var publicKey: String?
    public var device: UserKeyDevice?
    public var sealed: String?
    public init(
        step: Step, code: String? = nil, commitment: String? = nil, publicKey: String? = nil, device: UserKeyDevice? = nil,
        sealed: String? = nil
    ) {
        self.step = step
        self.code = code
        self.commitment = commitment
        self.publicKey = publicKey
        self.device = device
        self.sealed = sealed
    }
}

/// A pairing as far as it has come.
public struct UserPairing: HubMessage {
    public static let messageType: MessageType = "user.pairing.reply"
    public var code: String
    public var expiresAt: Date
    public var commitment: String
    /// The holding device's ephemeral public key.
    public var answerKey: String?
    /// The new device's ephemeral public key and its device key.
    public var revealKey: String?
    public var device: UserKeyDevice?
    /// The keys, sealed for the new device.
    public var sealed: String?
    public init(
        code: String, expiresAt: Date, commitment: String, answerKey: String? = nil, revealKey: String? = nil,
        device: UserKeyDevice? = nil, sealed: String? = nil
    ) {
        self.code = code
        self.expiresAt = expiresAt
        self.commitment = commitment
        self.answerKey = answerKey
        self.revealKey = revealKey
        self.device = device
        self.sealed = sealed
    }
}
