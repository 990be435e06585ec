import Foundation
import HubProtocol

/// Message encryption for Web Push (RFC 8291), content coding aes128gcm (RFC 8188), one record.
public enum WebPushEncryption {
    /// The record size written in the header, and the most one body may take.
    public static let recordSize = 4096
    /// salt 16, rs 4, idlen 1, keyid 65 (the sender's public point).
    static let headerLength = 16 + 4 + 1 + 65

    /// The largest plaintext one 4096-byte record carries (4096 - 86 header - 16 tag - 1 delimiter = 3993).
    public static let maxPlaintext = recordSize - headerLength - AESGCM.tagLength - 1

    /// The encrypted body: the aes128gcm header (salt 16, rs 4 big-endian = 4096, idlen 1 = 65, keyid = the sender's
    /// public point) and one record (plaintext || 0x02, sealed). `salt` and `senderKey` default to fresh random ones.
    /// A larger `recordSize` than Web Push's 4096 makes one record of more (the keyrings the user's
    /// devices seal for each other).
    public static func encrypt(
        _ plaintext: Data, p256dh: Data, auth: Data, salt: Data? = nil, senderKey: P256Key? = nil, recordSize: Int = recordSize
    ) throws(PushCryptoError) -> Data {
        let maxPlaintext = recordSize - headerLength - AESGCM.tagLength - 1
        guard plaintext.count <= maxPlaintext else {
            throw PushCryptoError("a Web Push message carries at most \(maxPlaintext) bytes; this one has \(plaintext.count)")
        }
        let salt = salt ?? Crypto.randomBytes(16)
        guard salt.count == 16 else { throw PushCryptoError("the aes128gcm salt is 16 bytes, not \(salt.count)") }
        let subscriber: P256Key
        do {
            subscriber = try P256Key(publicPoint: p256dh)
        } catch {
            throw PushCryptoError("the subscription's p256dh key is unusable: \(error.message)")
        }
        let sender = senderKey ?? P256Key.generate()
        let (key, nonce) = try contentKeys(
            secret: sender.sharedSecret(with: subscriber), auth: auth, salt: salt,
            subscriberPoint: subscriber.publicPoint, senderPoint: sender.publicPoint)
        let record = try AESGCM.seal128(key: key, nonce: nonce, plaintext: plaintext + [0x02])
        let recordSize = UInt32(recordSize)
        let sizeBytes: [UInt8] = [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: recordSize >> $0) }
        return salt + sizeBytes + [UInt8(sender.publicPoint.count)] + sender.publicPoint + record
    }

    /// Decryption with the subscriber's private key and auth secret, for tests and stand-ins.
    public static func decrypt(_ body: Data, subscriber: P256Key, auth: Data) throws(PushCryptoError) -> Data {
        let bytes = [UInt8](body)
        guard bytes.count >= headerLength + AESGCM.tagLength + 1 else {
            throw PushCryptoError("an aes128gcm body of \(bytes.count) bytes is too short for a header and a record")
        }
        let salt = Data(bytes[0..<16])
        let recordSize = bytes[16..<20].reduce(0) { $0 << 8 | Int($1) }
        guard bytes[20] == 65 else {
            throw PushCryptoError("the aes128gcm key id is \(bytes[20]) bytes; Web Push puts the 65-byte sender key there")
        }
        let record = Data(bytes[headerLength...])
        guard record.count <= recordSize else {
            throw PushCryptoError("the body holds more than one \(recordSize)-byte record; only single-record messages are read")
        }
        let sender: P256Key
        do {
            sender = try P256Key(publicPoint: Data(bytes[21..<headerLength]))
        } catch {
            throw PushCryptoError("the sender key in the aes128gcm header is unusable: \(error.message)")
        }
        let (key, nonce) = try contentKeys(
            secret: subscriber.sharedSecret(with: sender), auth: auth, salt: salt,
            subscriberPoint: subscriber.publicPoint, senderPoint: sender.publicPoint)
        var padded = try AESGCM.open128(key: key, nonce: nonce, sealed: record)
        // Padding: the delimiter, then zeros (RFC 8188 §2).
        while padded.last == 0 { padded.removeLast() }
        guard padded.last == 0x02 else {
            throw PushCryptoError("the record does not end with the last-record delimiter 0x02")
        }
        return Data(padded.dropLast())
    }

    /// The content encryption key and nonce (RFC 8291 §3.4, RFC 8188 §2.2).
    private static func contentKeys(
        secret: Data, auth: Data, salt: Data, subscriberPoint: Data, senderPoint: Data
    ) throws(PushCryptoError) -> (key: Data, nonce: Data) {
        guard auth.count == 16 else {
            throw PushCryptoError("the subscription's auth secret is 16 bytes, not \(auth.count)")
        }
        let keyInfo = Data("WebPush: info".utf8) + [0] + subscriberPoint + senderPoint
        let ikm = HKDF.sha256(salt: auth, ikm: secret, info: keyInfo, length: 32)
        let key = HKDF.sha256(salt: salt, ikm: ikm, info: Data("Content-Encoding: aes128gcm".utf8) + [0], length: 16)
        let nonce = HKDF.sha256(salt: salt, ikm: ikm, info: Data("Content-Encoding: nonce".utf8) + [0], length: 12)
        return (key, nonce)
    }
}

/// VAPID (RFC 8292): a key pair per hub and the Authorization header value for one push service origin.
public enum VAPID {
    /// The longest a token may live; push services refuse an exp further than 24 hours ahead.
    public static let maxLifetime: TimeInterval = 24 * 3600

    /// `vapid t=<ES256 JWT with aud = origin, exp = now + lifetime (at most 24 h), sub = subject>, k=<base64url public point>`.
    public static func authorization(
        origin: String, subject: String, key: P256Key, now: Date = Date(), lifetime: TimeInterval = 12 * 3600
    ) throws(PushCryptoError) -> String {
        guard lifetime > 0, lifetime <= maxLifetime else {
            throw PushCryptoError("a VAPID token lives more than 0 and at most 24 hours, not \(lifetime) seconds")
        }
        guard subject.hasPrefix("mailto:") || subject.hasPrefix("https:") else {
            throw PushCryptoError("the VAPID subject is a mailto: or https: URL, not \"\(subject)\"")
        }
        let expiry = (now.timeIntervalSince1970 + lifetime).rounded(.down)
        let token = try JWT.es256(
            header: [:], claims: ["aud": .string(origin), "exp": .number(expiry), "sub": .string(subject)], key: key)
        return "vapid t=\(token), k=\(key.publicPoint.base64URL)"
    }

    /// The origin (scheme://host[:port]) of an endpoint URL; the scheme's default port is left out.
    public static func origin(of endpoint: String) -> String? {
        guard let url = URLComponents(string: endpoint), let scheme = url.scheme?.lowercased(),
            let defaultPort = ["https": 443, "http": 80][scheme], var host = url.host?.lowercased(), !host.isEmpty
        else {
            return nil
        }
        if host.contains(":"), !host.hasPrefix("[") { host = "[\(host)]" }
        guard let port = url.port, port != defaultPort else { return "\(scheme)://\(host)" }
        return "\(scheme)://\(host):\(port)"
    }
}

extension VAPID {
    /// Why a push was refused: 401 for a missing or invalid signature, 403 for a valid one by
    /// another key than the endpoint's.
    public struct Refusal: Error, Equatable, Sendable {
        public let status: Int
        public let message: String
    }

    /// Checks an application server's identification (RFC 8292) against the key an endpoint was
    /// registered with: `Authorization: vapid t=JWT, k=KEY`, or the older `WebPush JWT` with
    /// `Crypto-Key: p256ecdsa=KEY`. The JWT must be ES256, signed by KEY, for one of `audiences`
    /// (the push service's origins), and unexpired, no more than 24 hours ahead.
    public static func verify(
        authorization: String?, cryptoKey: String?, registered: String, audiences: [String], now: Date = Date()
    ) throws(Refusal) {
        func refuse(_ status: Int, _ message: String) -> Refusal { Refusal(status: status, message: message) }
        guard let authorization, !authorization.isEmpty else {
            throw refuse(401, "this endpoint takes only pushes signed with its app's VAPID key: send Authorization: vapid t=JWT, k=KEY")
        }
        let (scheme, rest) = split(authorization)
        var token: String?
        var key: String?
        switch scheme.lowercased() {
        case "vapid":
            for part in rest.split(separator: ",") {
                let pair = part.trimmingCharacters(in: .whitespaces)
                if pair.hasPrefix("t=") { token = String(pair.dropFirst(2)) }
                if pair.hasPrefix("k=") { key = String(pair.dropFirst(2)) }
            }
        case "webpush":
            token = rest.trimmingCharacters(in: .whitespaces)
            for part in (cryptoKey ?? "").split(whereSeparator: { $0 == ";" || $0 == "," }) {
                let pair = part.trimmingCharacters(in: .whitespaces)
                if pair.hasPrefix("p256ecdsa=") { key = String(pair.dropFirst(10)) }
            }
        default:
            throw refuse(401, "Authorization '\(scheme.prefix(20))' is not VAPID: send Authorization: vapid t=JWT, k=KEY")
        }
        guard let token, !token.isEmpty, let key, !key.isEmpty else {
            throw refuse(401, "the VAPID Authorization needs both t= (the JWT) and k= (the public key)")
        }
        guard let presented = Data(base64URL: key.trimmingCharacters(in: CharacterSet(charactersIn: "\""))),
            let expected = Data(base64URL: registered)
        else {
            throw refuse(401, "the VAPID k= is not base64url")
        }
        guard presented == expected else {
            throw refuse(403, "the push is signed with another VAPID key than the one its app registered")
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Data(base64URL: String(parts[0])), let claimsData = Data(base64URL: String(parts[1])),
            let signature = Data(base64URL: String(parts[2]))
        else {
            throw refuse(401, "the VAPID t= is not a JWT (three base64url parts)")
        }
        // Refused just below, as a VAPID header that is not JSON.
        guard let header = try? JSONDecoder().decode([String: JSONValue].self, from: headerData), header["alg"] == .string("ES256") else {
            throw refuse(401, "the VAPID JWT must be signed with ES256")
        }
        // Refused just below: a key that does not read cannot verify.
        guard let publicKey = try? P256Key(publicPoint: presented),
            publicKey.verifyES256(signature, for: Data("\(parts[0]).\(parts[1])".utf8))
        else {
            throw refuse(401, "the VAPID JWT's signature does not verify with k=")
        }
        // Refused just below, as claims that are not JSON.
        guard let claims = try? JSONDecoder().decode([String: JSONValue].self, from: claimsData) else {
            throw refuse(401, "the VAPID JWT's claims are not a JSON object")
        }
        guard case .string(let audience)? = claims["aud"], audiences.contains(audience.lowercased()) else {
            throw refuse(401, "the VAPID JWT's aud must be this push service's origin, \(audiences.first ?? "")")
        }
        guard let expiry = claims["exp"]?.doubleValue else { throw refuse(401, "the VAPID JWT has no exp") }
        let seconds = now.timeIntervalSince1970
        guard expiry > seconds else { throw refuse(401, "the VAPID JWT expired; sign a fresh one") }
        guard expiry <= seconds + maxLifetime + 60 else {
            throw refuse(401, "the VAPID JWT's exp is more than 24 hours ahead")
        }
    }

    private static func split(_ header: String) -> (String, String) {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard let space = trimmed.firstIndex(of: " ") else { return (trimmed, "") }
        return (String(trimmed[..<space]), String(trimmed[trimmed.index(after: space)...]))
    }
}
