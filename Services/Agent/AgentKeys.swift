import Auth
import Foundation
import HubProtocol

/// The device's side of notifications encrypted end to end: its own device key, made once, and
/// the user's keyring, both in the agent's store (readable by its owner alone). It opens an
/// encrypted notification before the agent shows it, and takes a rotated keyring the hub keeps
/// sealed for this device when a notification is for a key it does not hold yet.
final class AgentKeys {
    let store: AgentStore
    let device: String
    static let deviceKeySetting = "e2e.deviceKey"
    static let keyringSetting = "e2e.keyring"

    init(store: AgentStore, device: String) {
        self.store = store
        self.device = device
    }

    /// The device's own P-256 key, made on first use.
    func deviceKey() throws -> P256Key {
        if let stored = try store.setting(Self.deviceKeySetting), let scalar = Data(base64URL: stored) {
            return try P256Key(privateScalar: scalar)
        }
        let (scalar, key) = UserKeyring.newKey()
        try store.set(Self.deviceKeySetting, scalar.base64URL)
        try protect()
        return key
    }

    func deviceEntry(name: String? = nil) throws -> UserKeyring.DeviceEntry {
        UserKeyring.DeviceEntry(device: device, publicKey: try deviceKey().publicPoint.base64URL, name: name ?? Self.hostName)
    }

    static var hostName: String { ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "device" }

    func keyring() throws -> UserKeyring? {
        guard let text = try store.setting(Self.keyringSetting) else { return nil }
        return try UserKeyring.decoder.decode(UserKeyring.self, from: Data(text.utf8))
    }

    func save(_ keyring: UserKeyring) throws {
        try store.set(Self.keyringSetting, String(decoding: try UserKeyring.encoder.encode(keyring), as: UTF8.self))
        try protect()
    }

    /// The store holds private keys: its files are the owner's alone.
    private func protect() throws {
        let path = store.database.path
        for file in [path, path + "-wal", path + "-shm"] where FileManager.default.fileExists(atPath: file) {
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file)
        }
    }

    // MARK: Reading

    /// The notification as the person reads it: an encrypted one with its visual and raw content
    /// from the record (`encrypted` and `keyId` stay, so an app sees it was encrypted). One for a
    /// key this device lacks first takes the keyring a rotation left for it (`fetch` asks the hub);
    /// one it cannot open stays as it came.
    func readable(_ notification: UserNotification, fetch: () throws -> UserKey) -> (UserNotification, failure: String?) {
        guard let encrypted = notification.encrypted else { return (notification, nil) }
        do {
            guard let record = Data(base64URL: encrypted) else { return (notification, "the record is not base64url") }
            let content = try JSONDecoder().decode(Content.self, from: try open(record, keyId: notification.keyId, fetch: fetch))
            var readable = notification
            readable.visual = content.visual
            readable.raw = content.raw
            return (readable, nil)
        } catch let error as PushCryptoError {
            return (notification, error.message)
        } catch {
            return (notification, "\(error)")
        }
    }

    /// The plaintext of an RFC 8291 record for the user's key `keyId` (each key in turn without
    /// one), taking the keyring a rotation left for this device first when it lacks that key.
    func open(_ record: Data, keyId: String?, fetch: () throws -> UserKey) throws -> Data {
        guard var keyring = try keyring() else {
            throw PushCryptoError("this device does not hold the user's key: pair it (nh-agent pair)")
        }
        if let keyId, keyring.key(id: keyId) == nil {
            keyring = try takeRotation(keyring, fetch: fetch)
        }
        return try keyring.open(record, keyId: keyId)
    }

    /// The plaintext of a record: what a backend encrypted.
    struct Content: Codable {
        var visual: VisualContent?
        var raw: String?
    }

    /// The keyring the last rotation sealed for this device, merged with this one, and saved.
    func takeRotation(_ keyring: UserKeyring, fetch: () throws -> UserKey) throws -> UserKeyring {
        let key = try fetch()
        guard key.keyId != keyring.current.keyId else { return keyring }
        guard let envelope = key.envelope else {
            throw PushCryptoError(
                "the user's key is now \(key.keyId) and the hub holds none of it for this device (it was revoked, or joined after): pair it again (nh-agent pair)")
        }
        let device = try deviceKey()
        let newer = try UserKeyring.open(sealed: envelope, key: device, auth: UserKeyring.deviceAuth(device.publicPoint))
        let merged = keyring.merged(newer: newer)
        try save(merged)
        return merged
    }
}
