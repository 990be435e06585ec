import Foundation
import Testing

@testable import Auth

/// Tokens whose signature was checked are kept, and only those; what a kept token says is still
/// held to its kind and expiry on each use.
@Suite("Checked user tokens")
struct CheckedTokensTests {
    let now = Date(timeIntervalSince1970: 1_900_000_000)

    @Test("a signed token is checked once and kept; its kind and expiry are held to on every use")
    func kept() throws {
        let tokens = UserTokens(secret: Data(repeating: 7, count: 32))
        let (token, _) = tokens.issue(user: "alice", kind: .token, lifetime: 60, now: now)
        #expect(tokens.checked.count == 0)
        #expect(try tokens.verify(token, kind: .token, now: now).user == "alice")
        #expect(tokens.checked.count == 1)
        #expect(try tokens.verify(token, kind: .token, now: now.addingTimeInterval(59)).user == "alice")
        #expect(tokens.checked.count == 1)
        #expect(throws: AuthError.self) { try tokens.verify(token, kind: .token, now: now.addingTimeInterval(60)) }
        #expect(throws: AuthError.self) { try tokens.verify(token, kind: .ticket, now: now) }
    }

    @Test("forged, malformed and foreign tokens are refused and never kept; another secret keeps its own")
    func refusedNotKept() throws {
        let tokens = UserTokens(secret: Data(repeating: 7, count: 32))
        let other = UserTokens(secret: Data(repeating: 8, count: 32))
        let (token, _) = tokens.issue(user: "alice", kind: .token, lifetime: 60, now: now)
        _ = try tokens.verify(token, kind: .token, now: now)
        #expect(throws: AuthError.self) { try other.verify(token, kind: .token, now: now) }
        let parts = token.split(separator: ".")
        let forged = "\(parts[0]).\(Data(#"{"u":"mallory","k":"token","exp":2000000000,"n":"x"}"#.utf8).base64URL).\(parts[2])"
        for bad in [forged, token + "x", "nhu1.abc", String(token.dropLast())] {
            #expect(throws: AuthError.self) { try tokens.verify(bad, kind: .token, now: now) }
        }
        #expect(tokens.checked.count == 1)
        #expect(other.checked.count == 0)
    }

    @Test("a token that fails its kind or expiry, a credential, a ticket and a token that is not ASCII are never kept")
    func onlyAdmittedTokensKept() throws {
        let tokens = UserTokens(secret: Data(repeating: 7, count: 32))
        let (expired, _) = tokens.issue(user: "alice", kind: .token, lifetime: 60, now: now.addingTimeInterval(-120))
        #expect(throws: AuthError.self) { try tokens.verify(expired, kind: .token, now: now) }
        let (token, _) = tokens.issue(user: "alice", kind: .token, lifetime: 60, now: now)
        #expect(throws: AuthError.self) { try tokens.verify(token, kind: .credential, now: now) }
        let (credential, _) = tokens.issue(user: "alice", kind: .credential, lifetime: 600, now: now)
        #expect(try tokens.verify(credential, kind: .credential, now: now).user == "alice")
        let (ticket, _) = tokens.issue(user: "i-1", kind: .ticket, lifetime: 60, resource: "r", now: now)
        #expect(try tokens.verify(ticket, kind: .ticket, now: now).resource == "r")
        #expect(tokens.checked.count == 0)
        // Once kept, a copy with a character canonically equal to one of its own (KELVIN SIGN for
        // K) is still refused: only the bytes as sent are looked up.
        var withK = tokens.issue(user: "bob", kind: .token, lifetime: 60, now: now).token
        for _ in 0..<50 where !withK.contains("K") { withK = tokens.issue(user: "bob", kind: .token, lifetime: 60, now: now).token }
        try #require(withK.contains("K"))
        #expect(try tokens.verify(withK, kind: .token, now: now).user == "bob")
        #expect(tokens.checked.count == 1)
        let kelvin = withK.replacingOccurrences(of: "K", with: "\u{212A}")
        #expect(kelvin == withK, "Swift's strings compare canonically: the cache must not")
        #expect(throws: AuthError.self) { try tokens.verify(kelvin, kind: .token, now: now) }
    }

    @Test("past its capacity the table starts again, and every token still verifies")
    func capacity() throws {
        let tokens = UserTokens(secret: Data(repeating: 9, count: 32))
        let issued = (0...CheckedTokens.capacity).map { tokens.issue(user: "u\($0)", kind: .token, lifetime: 60, now: now).token }
        for (index, token) in issued.enumerated() {
            #expect(try tokens.verify(token, kind: .token, now: now).user == "u\(index)")
        }
        #expect(tokens.checked.count == 1)
        for (index, token) in issued.enumerated().reversed().prefix(10) {
            #expect(try tokens.verify(token, kind: .token, now: now).user == "u\(index)")
        }
        // The last one was kept when the table started again; the nine before it join it.
        #expect(tokens.checked.count == 10)
    }
}
