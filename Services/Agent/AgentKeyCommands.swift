import Auth
import Foundation
import HubProtocol

/// `nh-agent keys …` and `nh-agent pair …`: the user's encryption key made, shown, rotated,
/// recovered, and handed to a new device by pairing. Each talks to the sync store with the user's
/// token; the person answers the confirmation question on standard input.
struct AgentKeyCommands {
    let keys: AgentKeys
    let sync: AgentUserSync
    /// Reads the person's answer to a question; nil at the end of input.
    var readLine: () -> String? = { Swift.readLine() }
    /// How often a pairing step looks for the other side's.
    var pollInterval: TimeInterval = 0.2

    func say(_ text: String) {
        // Unbuffered: the person (or a test) reads each line as the pairing goes on.
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    // MARK: keys

    /// `keys init [--plaintext refuse]`: the user's first key, made on this device. Prints the recovery key once.
    func initialize(refusePlaintext: Bool) throws -> Int32 {
        if let existing = try? sync.call(UserKeyRequest()) {
            throw AgentKeyError("the user has a key already (\(existing.keyId)): pair this device with one that holds it (nh-agent pair)")
        }
        let recovery = RecoveryKey.generate()
        let keyring = UserKeyring.make(recovery: recovery, devices: [try keys.deviceEntry()])
        let reply = try put(keyring, replaces: nil, refusePlaintext: refusePlaintext, envelopes: nil)
        try keys.save(keyring)
        say("""
            The user's key is \(reply.keyId); this device holds it.
            Recovery key (write it down; it is shown this once, and restores the key with nh-agent keys recover):

                \(recovery.text)

            """)
        return 0
    }

    /// `keys`: the current key, the devices that hold it, and this device's part.
    func show() throws -> Int32 {
        let key = try sync.call(UserKeyRequest(device: keys.device))
        let keyring = try keys.keyring()
        say("key \(key.keyId), made \(ISO8601DateFormatter().string(from: key.createdAt))\(key.refusePlaintext ? ", plaintext posts refused" : "")")
        let verified = keyring.map { $0.verifyDevices(devices(key), signature: key.devicesSignature ?? "") } ?? false
        for device in key.devices ?? [] {
            let mark = device.device == keys.device ? "  (this device)" : ""
            say("  \(device.device)  \(device.name ?? "")\(mark)")
        }
        if let keyring {
            let holds = keyring.key(id: key.keyId) != nil ? "holds it" : "holds an older key: a notification for the new one takes it"
            say("this device \(holds); \(keyring.keys.count) key\(keyring.keys.count == 1 ? "" : "s") kept\(verified ? "" : "; the hub's device list is not signed by this keyring")")
        } else {
            say("this device does not hold the key: nh-agent pair")
        }
        return 0
    }

    /// `keys rotate [--revoke DEVICE,…] [--plaintext refuse|accept]`: a new key for every device
    /// but the revoked ones, sealed for each; the old keys stay on the devices, for old notifications.
    func rotate(revoke: [String], refusePlaintext: Bool?) throws -> Int32 {
        guard var keyring = try keys.keyring() else { throw AgentKeyError("this device does not hold the user's key: pair it first (nh-agent pair)") }
        let current = try sync.call(UserKeyRequest(device: keys.device))
        if current.keyId != keyring.current.keyId {
            keyring = try keys.takeRotation(keyring) { current }
        }
        // The hub's list counts only when this keyring's signing key signed it.
        let listed = devices(current)
        var members = keyring.verifyDevices(listed, signature: current.devicesSignature ?? "") ? listed : keyring.devices
        for device in revoke {
            guard device != keys.device else { throw AgentKeyError("a device cannot revoke itself; revoke it from another") }
            guard members.contains(where: { $0.device == device }) else {
                throw AgentKeyError("no device '\(device)' holds the key; nh-agent keys lists them")
            }
            members.removeAll { $0.device == device }
        }
        if !members.contains(where: { $0.device == keys.device }) { members.append(try keys.deviceEntry()) }
        let next = keyring.rotated(devices: members)
        var envelopes: [String: String] = [:]
        for member in members where member.device != keys.device {
            guard let point = Data(base64URL: member.publicKey) else { continue }
            envelopes[member.device] = try next.seal(forPublicKey: point, auth: UserKeyring.deviceAuth(point))
        }
        let reply = try put(next, replaces: current.keyId, refusePlaintext: refusePlaintext ?? current.refusePlaintext, envelopes: envelopes)
        try keys.save(next)
        say("The user's key is now \(reply.keyId), sealed for \(members.count - 1) other device\(members.count == 2 ? "" : "s").")
        if !revoke.isEmpty { say("Revoked: \(revoke.joined(separator: ", ")); they keep only what they could read before.") }
        return 0
    }

    /// `keys recover [KEY]`: the keyring the hub keeps sealed for the recovery key, opened here.
    func recover(_ text: String?) throws -> Int32 {
        var text = text
        if text == nil {
            say("Recovery key:")
            text = readLine()
        }
        let recovery = try RecoveryKey(text: text ?? "")
        let key = try sync.call(UserKeyRequest(device: keys.device))
        guard let sealed = key.recovery else { throw AgentKeyError("the hub holds no recovery record for this user") }
        var keyring = try UserKeyring.open(sealed: sealed.record, key: recovery.key, auth: recovery.auth)
        if let held = try keys.keyring() { keyring = held.merged(newer: keyring) }
        let own = try keys.deviceEntry()
        keyring.devices.removeAll { $0.device == own.device }
        keyring.devices.append(own)
        try keys.save(keyring)
        _ = try put(keyring, replaces: key.keyId, refusePlaintext: key.refusePlaintext, envelopes: nil)
        say("This device holds the user's key \(keyring.current.keyId) again (\(keyring.keys.count) key\(keyring.keys.count == 1 ? "" : "s")).")
        return 0
    }

    /// Sets the key record: the keyring's current key, its devices signed, sealed for the recovery key.
    private func put(_ keyring: UserKeyring, replaces: String?, refusePlaintext: Bool?, envelopes: [String: String]?) throws -> UserKey {
        guard let recoveryPoint = Data(base64URL: keyring.recoveryPublicKey), let recoveryAuth = Data(base64URL: keyring.recoveryAuth) else {
            throw AgentKeyError("the keyring's recovery key is not readable")
        }
        let record = try keyring.seal(forPublicKey: recoveryPoint, auth: recoveryAuth)
        return try sync.call(PutUserKey(
            p256dh: keyring.current.p256dh, auth: keyring.current.auth, replaces: replaces, refusePlaintext: refusePlaintext,
            devices: keyring.devices,
            devicesSignature: try keyring.signDevices(), envelopes: envelopes,
            recovery: UserKeyRecovery(publicKey: keyring.recoveryPublicKey, auth: keyring.recoveryAuth, record: record)))
    }

    private func devices(_ key: UserKey) -> [UserKeyDevice] { key.devices ?? [] }

    // MARK: pair

    /// `pair`: this device, new, gets the keyring from one that holds it.
    func pairNew() throws -> Int32 {
        let (_, ephemeral) = UserKeyring.newKey()
        let opened = try sync.call(UserPairingRequest(step: .open, commitment: Pairing.commitment(ephemeral.publicPoint)))
        say("""
            Pairing code: \(opened.code)
            On a device that holds the key, run: nh-agent pair accept \(opened.code)
            (or enter the code on the inbox page's Keys panel). Waiting…
            """)
        let answered = try wait(opened.code, until: opened.expiresAt) { $0.answerKey != nil }
        guard let answer = answered.answerKey.flatMap({ Data(base64URL: $0) }) else { throw AgentKeyError("the answer is not a key") }
        let device = try keys.deviceEntry()
        _ = try sync.call(UserPairingRequest(step: .reveal, code: opened.code, publicKey: ephemeral.publicPoint.base64URL, device: device))
        let (confirmation, sealKey) = try Pairing.derive(
            own: ephemeral, peer: answer, answerKey: answer, revealKey: ephemeral.publicPoint, device: device)
        guard confirm(confirmation) else {
            say("Pairing abandoned: nothing was taken.")
            return 1
        }
        say("Waiting for the other device to send the key…")
        let delivered = try wait(opened.code, until: opened.expiresAt) { $0.sealed != nil }
        let keyring: UserKeyring
        do {
            keyring = try Pairing.open(delivered.sealed ?? "", key: sealKey)
        } catch {
            throw AgentKeyError("the key that came does not open with this pairing's secret: the exchange was changed on the way; nothing was kept")
        }
        try keys.save(try keys.keyring().map { $0.merged(newer: keyring) } ?? keyring)
        say("Paired: this device holds the user's key \(keyring.current.keyId).")
        return 0
    }

    /// `pair accept CODE`: this device, which holds the keyring, hands it to the new one.
    func pairAccept(_ code: String) throws -> Int32 {
        guard var keyring = try keys.keyring() else { throw AgentKeyError("this device does not hold the user's key; it cannot hand it on") }
        let (_, ephemeral) = UserKeyring.newKey()
        let pairing = try sync.call(UserPairingRequest(step: .answer, code: code, publicKey: ephemeral.publicPoint.base64URL))
        say("Answered pairing \(code). Waiting for the new device…")
        let revealed = try wait(code, until: pairing.expiresAt) { $0.revealKey != nil }
        guard let reveal = revealed.revealKey.flatMap({ Data(base64URL: $0) }), let device = revealed.device else {
            throw AgentKeyError("the new device's answer is not a key")
        }
        // The commitment this device read before answering binds the new device's key: a key
        // swapped on the way after that does not match it.
        guard Pairing.commitment(reveal) == pairing.commitment else {
            say("Pairing refused: the new device's key is not the one it opened the pairing with; the exchange was changed on the way. Nothing was sent.")
            return 1
        }
        let entry = device
        let (confirmation, sealKey) = try Pairing.derive(
            own: ephemeral, peer: reveal, answerKey: ephemeral.publicPoint, revealKey: reveal, device: entry)
        guard confirm(confirmation) else {
            say("Pairing abandoned: nothing was sent.")
            return 1
        }
        keyring.devices.removeAll { $0.device == entry.device }
        keyring.devices.append(entry)
        _ = try sync.call(UserPairingRequest(step: .deliver, code: code, sealed: try Pairing.seal(keyring, key: sealKey)))
        try keys.save(keyring)
        let current = try sync.call(UserKeyRequest(device: keys.device))
        _ = try put(keyring, replaces: current.keyId, refusePlaintext: current.refusePlaintext, envelopes: nil)
        say("Sent the key to \(entry.name ?? entry.device) (\(entry.device)).")
        return 0
    }

    /// Shows the confirmation string and asks the person whether the other device shows the same.
    private func confirm(_ confirmation: String) -> Bool {
        say("Confirmation: \(confirmation)")
        say("Does the other device show the same confirmation? [y/N]")
        let answer = readLine()?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        return answer == "y" || answer == "yes"
    }

    private func wait(_ code: String, until deadline: Date, _ done: (UserPairing) -> Bool) throws -> UserPairing {
        while Date() < deadline {
            let pairing = try sync.call(UserPairingRequest(step: .get, code: code))
            if done(pairing) { return pairing }
            Thread.sleep(forTimeInterval: pollInterval)
        }
        throw AgentKeyError("pairing \(code) expired before the other device went on")
    }
}

struct AgentKeyError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
