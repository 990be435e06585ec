import COpenSSL
import Foundation

/// The few primitives the hub needs, from OpenSSL's libcrypto.
public enum Crypto {
    /// HMAC-SHA256 of `message` under `key`.
    public static func hmacSHA256(key: Data, message: Data) -> Data {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        key.withUnsafeBytes { keyBytes in
            message.withUnsafeBytes { messageBytes in
                _ = HMAC(
                    EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count),
                    messageBytes.baseAddress?.assumingMemoryBound(to: UInt8.self), messageBytes.count,
                    &output, &length)
            }
        }
        return Data(output.prefix(Int(length)))
    }

    public static func sha256(_ data: Data) -> Data { digest(data, EVP_sha256()) }

    /// MD5, for a protocol that signs with it (Baidu Cloud Push), never for anything of the hub's own.
    public static func md5(_ data: Data) -> Data { digest(data, EVP_md5()) }

    private static func digest(_ data: Data, _ type: OpaquePointer?) -> Data {
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        data.withUnsafeBytes { bytes in
            _ = EVP_Digest(bytes.baseAddress, bytes.count, &output, &length, type, nil)
        }
        return Data(output.prefix(Int(length)))
    }

    /// Cryptographically random bytes.
    public static func randomBytes(_ count: Int) -> Data {
        var bytes = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&bytes, Int32(count)) == 1 else {
            fatalError("RAND_bytes failed: the system has no entropy source")
        }
        return Data(bytes)
    }

    /// Compares in time that does not depend on where the inputs differ.
    public static func constantTimeEqual(_ a: Data, _ b: Data) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { left in
            b.withUnsafeBytes { right in CRYPTO_memcmp(left.baseAddress, right.baseAddress, a.count) == 0 }
        }
    }
}

extension Data {
    public var hexString: String { map { String(format: "%02x", $0) }.joined() }
}

/// Push endpoints' secrets (UnifiedPush, Web Push): the last segment of an endpoint URL.
public enum PushEndpointSecret {
    /// A new secret: 160 random bits, base64url.
    public static func make() -> String { Crypto.randomBytes(20).base64URL }

    /// The endpoint id the hub keeps for `secret`: its SHA-256, base64url. The secret itself is never stored by the hub.
    public static func id(of secret: String) -> String { Crypto.sha256(Data(secret.utf8)).base64URL }
}
