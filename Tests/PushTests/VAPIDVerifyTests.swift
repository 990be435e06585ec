import Auth
import Foundation
import HubProtocol
import Testing

@testable import Push

/// A push server's side of VAPID (RFC 8292): what an application server signs is checked against
/// the key its app registered.
@Suite("VAPID verification")
struct VAPIDVerifyTests {
    let key = P256Key.generate()
    let origin = "https://hub.example.org"
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    var registered: String { key.publicPoint.base64URL }

    func verify(_ authorization: String?, cryptoKey: String? = nil, registered: String? = nil) -> Int {
        do {
            try VAPID.verify(
                authorization: authorization, cryptoKey: cryptoKey, registered: registered ?? self.registered,
                audiences: [origin, "http://127.0.0.1:7780"], now: now)
            return 0
        } catch {
            return error.status
        }
    }

    @Test("a token signed with the registered key, for this origin and unexpired, verifies; the older WebPush scheme too")
    func verifies() throws {
        let header = try VAPID.authorization(origin: origin, subject: "mailto:ops@example.org", key: key, now: now)
        #expect(verify(header) == 0)
        let token = try #require(header.split(separator: ",").first?.dropFirst("vapid t=".count))
        #expect(verify("WebPush \(token)", cryptoKey: "dh=abc;p256ecdsa=\(registered)") == 0)
    }

    @Test("no header, another scheme, a missing part or a bad signature is 401; another registered key is 403")
    func refusals() throws {
        let header = try VAPID.authorization(origin: origin, subject: "mailto:ops@example.org", key: key, now: now)
        #expect(verify(nil) == 401)
        #expect(verify("Bearer abc") == 401)
        #expect(verify("vapid k=\(registered)") == 401)
        #expect(verify(header, registered: P256Key.generate().publicPoint.base64URL) == 403)
        // Signed by another key but claiming the registered one: the signature does not verify.
        let other = try VAPID.authorization(origin: origin, subject: "mailto:ops@example.org", key: P256Key.generate(), now: now)
        let forged = other.replacingOccurrences(of: #"k=.*$"#, with: "k=\(registered)", options: .regularExpression)
        #expect(verify(forged) == 401)
        // One byte of the claims changed.
        var parts = header.split(separator: " ").map(String.init)
        parts[1] = parts[1].replacingOccurrences(of: "t=ey", with: "t=ez")
        #expect(verify(parts.joined(separator: " ")) == 401)
    }

    @Test("the audience must be this push service, and the token unexpired and at most 24 hours ahead")
    func claims() throws {
        let elsewhere = try VAPID.authorization(origin: "https://push.other.example", subject: "mailto:a@b.c", key: key, now: now)
        #expect(verify(elsewhere) == 401)
        let expired = try VAPID.authorization(origin: origin, subject: "mailto:a@b.c", key: key, now: now.addingTimeInterval(-7_200), lifetime: 3_600)
        #expect(verify(expired) == 401)
        let token = try JWT.es256(
            header: [:], claims: ["aud": .string(origin), "exp": .number(now.timeIntervalSince1970 + 3 * 86_400), "sub": .string("mailto:a@b.c")],
            key: key)
        #expect(verify("vapid t=\(token), k=\(registered)") == 401)
    }
}
