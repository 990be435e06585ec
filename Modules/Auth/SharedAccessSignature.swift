import Foundation

/// A shared-access signature token, as Notification Hubs and Service Bus use:
/// `SharedAccessSignature sr=<uri>&sig=<signature>&se=<expiry>&skn=<key name>`, where the
/// signature is base64(HMAC-SHA256(key, "<url-encoded lowercased uri>\n<expiry>")).
public struct SharedAccessSignature: Sendable, Equatable {
    /// The resource URI, URL-decoded.
    public let resource: String
    public let signature: String
    public let expiry: Int
    public let keyName: String
    /// `sr` exactly as it appeared in the token, still URL-encoded.
    let encodedResource: String

    public static let scheme = "SharedAccessSignature"

    /// Makes a token for `resource`, valid until `expiry` (seconds since 1970).
    public static func sign(resource: String, keyName: String, key: String, expiry: Int) -> String {
        let encoded = urlEncode(resource.lowercased())
        let signature = Crypto.hmacSHA256(key: Data(key.utf8), message: Data("\(encoded)\n\(expiry)".utf8))
            .base64EncodedString()
        return "\(scheme) sr=\(encoded)&sig=\(urlEncode(signature))&se=\(expiry)&skn=\(urlEncode(keyName))"
    }

    /// Reads a token. Fields may come in any order.
    public init(parsing token: String) throws(AuthError) {
        let trimmed = token.trimmingCharacters(in: .whitespaces)
        guard trimmed.hasPrefix(Self.scheme + " ") else {
            throw AuthError(.unauthorized, "the credential must start with 'SharedAccessSignature '")
        }
        var fields: [String: String] = [:]
        var raw: [String: String] = [:]
        for pair in trimmed.dropFirst(Self.scheme.count + 1).split(separator: "&") {
            guard let equals = pair.firstIndex(of: "=") else {
                throw AuthError(.unauthorized, "the token field '\(pair)' has no '='")
            }
            let name = String(pair[..<equals]).lowercased()
            let value = String(pair[pair.index(after: equals)...])
            raw[name] = value
            fields[name] = value.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? value
        }
        for name in ["sr", "sig", "se", "skn"] where fields[name]?.isEmpty ?? true {
            throw AuthError(.unauthorized, "the token has no '\(name)'; it needs sr, sig, se and skn")
        }
        guard let expiry = Int(fields["se"]!) else {
            throw AuthError(.unauthorized, "the token's 'se' must be seconds since 1970, not '\(fields["se"]!)'")
        }
        // A '+' in a base64 signature is often left unencoded; keep it.
        signature = raw["sig"].map { $0.removingPercentEncoding ?? $0 }!
        resource = fields["sr"]!
        encodedResource = raw["sr"]!
        self.expiry = expiry
        keyName = fields["skn"]!
    }

    /// Whether `key` made this signature. Clients encode the URI differently (upper- or lowercase
    /// hex, `+` or `%20`), so each common form of the string to sign is tried.
    public func isSigned(with key: String) -> Bool {
        guard let given = Data(base64Encoded: signature) else { return false }
        // The form the token itself carries first: almost every client signs exactly that.
        if Crypto.constantTimeEqual(Crypto.hmacSHA256(key: Data(key.utf8), message: Data("\(encodedResource)\n\(expiry)".utf8)), given) {
            return true
        }
        let lowered = resource.lowercased()
        let candidates = Set([
            encodedResource, Self.urlEncode(lowered), Self.urlEncode(lowered).lowercasedPercentEscapes,
            Self.urlEncode(lowered).replacingOccurrences(of: "+", with: "%20"), lowered, encodedResource.lowercased(),
        ])
        return candidates.contains { candidate in
            let expected = Crypto.hmacSHA256(key: Data(key.utf8), message: Data("\(candidate)\n\(expiry)".utf8))
            return Crypto.constantTimeEqual(expected, given)
        }
    }

    /// Whether the token's resource covers `requested`: a prefix of it, compared case-insensitively
    /// after URL-decoding, on a path boundary. A namespace-wide token covers every hub under it.
    public func covers(_ requested: String) -> Bool {
        let scope = Self.normalize(resource)
        let target = Self.normalize(requested)
        guard target.hasPrefix(scope) else { return false }
        if target.count == scope.count || scope.hasSuffix("/") { return true }
        let next = target[target.index(target.startIndex, offsetBy: scope.count)]
        return next == "/" || next == "?"
    }

    static func normalize(_ uri: String) -> String {
        var text = (uri.removingPercentEncoding ?? uri).lowercased()
        for scheme in ["sb://", "https://", "http://"] where text.hasPrefix(scheme) {
            text.removeFirst(scheme.count)
            break
        }
        while text.hasSuffix("/") { text.removeLast() }
        return text + "/"
    }

    /// Form-style URL encoding, as .NET's and Python's quote_plus: unreserved characters kept,
    /// space as '+', everything else %XX.
    public static func urlEncode(_ text: String) -> String {
        var output = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                UInt8(ascii: "~"):
                output.unicodeScalars.append(UnicodeScalar(byte))
            case UInt8(ascii: " "):
                output += "+"
            default:
                output += String(format: "%%%02X", byte)
            }
        }
        return output
    }
}

extension String {
    /// `%2F` → `%2f`, as .NET's HttpUtility.UrlEncode writes escapes.
    var lowercasedPercentEscapes: String {
        var output = ""
        var remaining = 0
        for character in self {
            if character == "%" {
                remaining = 2
                output.append(character)
            } else if remaining > 0 {
                output += character.lowercased()
                remaining -= 1
            } else {
                output.append(character)
            }
        }
        return output
    }
}
