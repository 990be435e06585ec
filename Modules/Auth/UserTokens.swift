import Foundation
import Synchronization

/// Signed user identities: `nhu1.<claims>.<signature>`, the claims base64url JSON of the user,
/// the kind and the expiry, signed with HMAC-SHA256 under the hub's user-token secret.
///
/// Two kinds: a long-lived *credential*, issued to a device when a backend enrolls it, and a
/// short-lived *token*, traded for the credential and sent with each request.
public struct UserTokens: Sendable {
    /// A user's credential and token; and a ticket that lets one installation fetch one resource.
    public enum Kind: String, Codable, Sendable { case credential, token, ticket }

    public struct Claims: Codable, Sendable, Equatable {
        public var user: String
        public var kind: Kind
        public var expiry: Int
        public var nonce: String
        /// What a ticket is for, such as a rich payload's id.
        public var resource: String?

        enum CodingKeys: String, CodingKey {
            case user = "u", kind = "k", expiry = "exp", nonce = "n", resource = "r"
        }
    }

    let secret: Data
    static let prefix = "nhu1"
    public static let fileName = "user-token.key"
    /// Tokens whose signature this secret has checked, with their claims.
    let checked = CheckedTokens()

    public init(secret: Data) { self.secret = secret }

    /// The secret in `user-token.key` in the data folder, made on first run.
    public static func loadOrCreate(directory: URL) throws -> UserTokens {
        let data = try SecretFile.loadOrCreate(directory.appendingPathComponent(fileName)) {
            Data(Crypto.randomBytes(32).base64EncodedString().utf8)
        }
        guard let secret = Data(base64Encoded: String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)),
            secret.count >= 32
        else {
            throw AuthError(.unauthorized, "\(fileName) must hold at least 32 bytes in base64")
        }
        return UserTokens(secret: secret)
    }

    public func issue(user: String, kind: Kind, lifetime: Int, resource: String? = nil, now: Date = Date())
        -> (token: String, expiresAt: Date)
    {
        let expiry = Int(now.timeIntervalSince1970) + lifetime
        let claims = Claims(user: user, kind: kind, expiry: expiry, nonce: Crypto.randomBytes(6).base64URL, resource: resource)
        // Claims of strings and numbers always encode.
        let body = ((try? JSONEncoder().encode(claims)) ?? Data()).base64URL
        let signature = Crypto.hmacSHA256(key: secret, message: Data("\(Self.prefix).\(body)".utf8)).base64URL
        return ("\(Self.prefix).\(body).\(signature)", Date(timeIntervalSince1970: TimeInterval(expiry)))
    }

    /// The claims of a token of `kind`, when it is well formed, signed with this secret, and not expired.
    public func verify(_ token: String?, kind: Kind, now: Date = Date()) throws(AuthError) -> Claims {
        guard let token, !token.isEmpty else {
            throw AuthError(.unauthorized, "no user \(kind); sign in as a user first")
        }
        // Only user tokens are kept (a credential is traded once, a ticket serves one fetch), and
        // only ASCII ones: for those, equal strings are equal bytes.
        let keep = kind == .token && token.utf8.allSatisfy { $0 < 0x80 }
        if keep, let claims = checked.claims(of: token) { return try Self.admit(claims, kind: kind, now: now) }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == Self.prefix, let body = Data(base64URL: String(parts[1])),
            let signature = Data(base64URL: String(parts[2]))
        else {
            throw AuthError(.unauthorized, "the user \(kind) is malformed")
        }
        let expected = Crypto.hmacSHA256(key: secret, message: Data("\(Self.prefix).\(parts[1])".utf8))
        guard Crypto.constantTimeEqual(expected, signature) else {
            throw AuthError(.unauthorized, "the user \(kind) has a bad signature")
        }
        guard let claims = try? JSONDecoder().decode(Claims.self, from: body) else {
            throw AuthError(.unauthorized, "the user \(kind) is malformed")
        }
        let admitted = try Self.admit(claims, kind: kind, now: now)
        if keep { checked.remember(token, claims) }
        return admitted
    }

    /// Signed claims, when they are of `kind` and not expired at `now`.
    private static func admit(_ claims: Claims, kind: Kind, now: Date) throws(AuthError) -> Claims {
        guard claims.kind == kind else {
            throw AuthError(.unauthorized, "a user \(claims.kind) was given where a user \(kind) is needed")
        }
        guard Double(claims.expiry) > now.timeIntervalSince1970 else {
            throw AuthError(.unauthorized, "the user \(kind) expired at \(Date(timeIntervalSince1970: Double(claims.expiry))); get a fresh one")
        }
        return claims
    }
}

/// User tokens whose signature has been checked, with their claims. A device sends the same token
/// with each request until it expires, and checking it again (two base64 decodes, an HMAC, a JSON
/// decode) cost the sync store more than the rest of a fetch. Only an ASCII token that passed
/// every check is kept, whole as it was sent, so a lookup that finds it is the same check; its
/// kind and expiry are still checked on each use. At most `capacity` are kept: when full, the
/// table starts again.
final class CheckedTokens: Sendable {
    static let capacity = 4_096
    private let table = Mutex<[String: UserTokens.Claims]>([:])

    func claims(of token: String) -> UserTokens.Claims? {
        table.withLock { $0[token] }
    }

    func remember(_ token: String, _ claims: UserTokens.Claims) {
        table.withLock { table in
            if table.count >= Self.capacity { table.removeAll(keepingCapacity: true) }
            table[token] = claims
        }
    }

    var count: Int { table.withLock { $0.count } }
}

extension Data {
    /// Base64 with the URL-safe alphabet and no padding.
    public var base64URL: String {
        base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    public init?(base64URL text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        self.init(base64Encoded: base64)
    }
}
