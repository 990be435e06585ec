import Auth
import Foundation
import Testing

@Suite("User tokens")
struct UserTokensTests {
    let tokens = UserTokens(secret: Data(repeating: 7, count: 32))
    let now = Date(timeIntervalSince1970: 1_900_000_000)

    @Test("a token verifies as its user and kind, until it expires")
    func roundTrip() throws {
        let (token, expiresAt) = tokens.issue(user: "alice", kind: .token, lifetime: 60, now: now)
        #expect(expiresAt == now.addingTimeInterval(60))
        #expect(try tokens.verify(token, kind: .token, now: now).user == "alice")
        #expect(throws: AuthError.self) { try tokens.verify(token, kind: .token, now: now.addingTimeInterval(61)) }
        #expect(throws: AuthError.self) { try tokens.verify(token, kind: .credential, now: now) }
    }

    @Test("missing, malformed, forged and foreign tokens are refused with the reason", arguments: [
        ("", "no user"), ("nhu1.abc", "malformed"), ("jwt.a.b", "malformed"),
    ])
    func refused(token: String, reason: String) {
        do {
            _ = try tokens.verify(token, kind: .token, now: now)
            Issue.record("should be refused")
        } catch {
            #expect(error.message.contains(reason), "\(error.message)")
        }
    }

    @Test("a changed claim or another hub's secret breaks the signature")
    func forged() throws {
        let (token, _) = tokens.issue(user: "alice", kind: .token, lifetime: 60, now: now)
        let parts = token.split(separator: ".")
        let claims = #"{"u":"mallory","k":"token","exp":2000000000,"n":"x"}"#
        let forged = "\(parts[0]).\(Data(claims.utf8).base64URL).\(parts[2])"
        #expect(throws: AuthError.self) { try tokens.verify(forged, kind: .token, now: now) }
        let other = UserTokens(secret: Data(repeating: 8, count: 32))
        #expect(throws: AuthError.self) { try other.verify(token, kind: .token, now: now) }
    }

    @Test("the secret is made once per data folder")
    func secretFile() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-ut-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let first = try UserTokens.loadOrCreate(directory: folder)
        let (token, _) = first.issue(user: "u", kind: .credential, lifetime: 60)
        #expect(try UserTokens.loadOrCreate(directory: folder).verify(token, kind: .credential).user == "u")
    }
}
