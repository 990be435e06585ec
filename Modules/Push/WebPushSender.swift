import Auth
import Foundation
import HubProtocol

/// Web Push (RFC 8030) to a browser's subscription: the payload encrypted for the subscription
/// (RFC 8291, aes128gcm), the request signed with the hub's VAPID key (RFC 8292), one signature
/// per push service origin, reused for 12 hours.
final class WebPushSender: PushSender {
    let service = PushService.browser
    let endpoint = "the subscription's endpoint"
    let key: P256Key
    private let subject: String
    private var signatures: [String: (header: String, madeAt: Date)] = [:]
    static let signatureLifetime: TimeInterval = 12 * 3_600

    init(_ settings: WebPushSettings, key: P256Key) throws(PushConfigurationError) {
        guard settings.subject.hasPrefix("mailto:") || settings.subject.hasPrefix("https://"), settings.subject.count > 8 else {
            throw PushConfigurationError(
                "push.browser.subject '\(settings.subject)' must be a mailto: or https: address where push services can reach the hub's operator, such as mailto:ops@example.com")
        }
        subject = settings.subject
        self.key = key
    }

    func renew(now: Date) { signatures.removeAll() }

    private func authorization(origin: String, now: Date) throws(PushRequestError) -> String {
        // Signed for 24 hours (the most RFC 8292 allows), used for 12.
        if let known = signatures[origin], now.timeIntervalSince(known.madeAt) < Self.signatureLifetime { return known.header }
        do {
            let header = try VAPID.authorization(origin: origin, subject: subject, key: key, now: now, lifetime: 24 * 3_600 - 60)
            if signatures.count > 1_000 { signatures.removeAll() }
            signatures[origin] = (header, now)
            return header
        } catch {
            throw PushRequestError(outcome: "InvalidCredentials", reason: "cannot sign for \(origin): \(error.message)")
        }
    }

    func request(for message: PushMessage, now: Date) throws(PushRequestError) -> PushHTTPRequest {
        let subscription = JSONValue.parse(message.pushChannel)
        guard let url = subscription?["endpoint"]?.stringValue, let origin = VAPID.origin(of: url), url.lowercased().hasPrefix("https://"),
            let p256dh = subscription?["p256dh"]?.stringValue.flatMap({ Data(base64URL: $0) }),
            let auth = subscription?["auth"]?.stringValue.flatMap({ Data(base64URL: $0) })
        else {
            throw PushRequestError(outcome: "BadChannel", reason: "the browser subscription needs an https endpoint, p256dh and auth")
        }
        let plaintext = Data(message.payload.utf8)
        guard plaintext.count <= WebPushEncryption.maxPlaintext else {
            throw PushRequestError(
                outcome: "InvalidNotificationSize",
                reason: "the payload is \(plaintext.count) bytes; Web Push carries at most \(WebPushEncryption.maxPlaintext) once encrypted")
        }
        // The key is checked here; the encryption itself (ECDH, HKDF, AES-GCM) is done off the
        // dispatcher's loop, just before the request goes out.
        let subscriber: P256Key
        do {
            subscriber = try P256Key(publicPoint: p256dh)
        } catch {
            throw PushRequestError(outcome: "BadChannel", reason: "the subscription's p256dh: \(error.message)")
        }
        guard auth.count == 16 else {
            throw PushRequestError(outcome: "BadChannel", reason: "the subscription's auth secret is \(auth.count) bytes, not 16")
        }
        var headers: [(String, String)] = [
            ("authorization", try authorization(origin: origin, now: now)),
            ("content-encoding", "aes128gcm"),
            ("content-type", "application/octet-stream"),
            ("ttl", String(max(0, Int(message.expiresAt.timeIntervalSince(now))))),
        ]
        if let urgency = message.headers["urgency"] { headers.append(("urgency", urgency)) }
        if let topic = message.headers["topic"] { headers.append(("topic", topic)) }
        var request = PushHTTPRequest(url: url, headers: headers, body: Data())
        request.makeBody = { () throws(PushRequestError) -> Data in
            do {
                return try WebPushEncryption.encrypt(plaintext, p256dh: subscriber.publicPoint, auth: auth)
            } catch {
                throw PushRequestError(outcome: "BadChannel", reason: "cannot encrypt for the subscription: \((error as? PushCryptoError)?.message ?? "\(error)")")
            }
        }
        return request
    }

    func classify(_ response: PushHTTPResponse, now: Date) -> PushResult {
        if (200...202).contains(response.status) { return .delivered }
        let reason = String(decoding: response.body.prefix(200), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let said = reason.isEmpty ? nil : reason
        if let common = common(response, reason: said, now: now) { return common }
        switch response.status {
        case 404, 410: return .channelExpired(reason: response.describe(said))
        case 401, 403: return .failed(outcome: "InvalidCredentials", reason: response.describe(said))
        default: return .failed(outcome: "PnsInterfaceError", reason: response.describe(said))
        }
    }

    func info(source: String) -> PushServiceInfo {
        PushServiceInfo(
            service: service.rawValue, platform: service.platform.rawValue, endpoint: endpoint, source: source,
            settings: ["subject": subject], keyFingerprint: Crypto.sha256(key.publicPoint).hexString, publicKey: key.publicPoint.base64URL)
    }
}
