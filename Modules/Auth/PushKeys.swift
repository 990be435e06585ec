import COpenSSL
import Foundation

/// Why a key, a signature or a push message could not be made or read.
public struct PushCryptoError: Error, Equatable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// A P-256 key for ES256 signatures and ECDH.
public final class P256Key: Sendable {
    let key: EVPKey
    /// False for a key made from a public point alone: it verifies and is a peer, but cannot sign.
    public let hasPrivateKey: Bool
    /// 65 bytes, 0x04 || X || Y.
    public let publicPoint: Data

    private init(_ key: EVPKey, hasPrivateKey: Bool) {
        self.key = key
        self.hasPrivateKey = hasPrivateKey
        var point = [UInt8](repeating: 0, count: 65)
        let exported = nh_p256_public_point(key.pointer, &point)
        precondition(exported == 1, "a P-256 key has a public point")
        publicPoint = Data(point)
    }

    public static func generate() -> P256Key {
        guard let pointer = nh_p256_generate() else { fatalError("OpenSSL could not generate a P-256 key") }
        return P256Key(EVPKey(pointer), hasPrivateKey: true)
    }

    /// PEM: PKCS#8 "BEGIN PRIVATE KEY" (an APNs .p8 file) or SEC1 "BEGIN EC PRIVATE KEY".
    public convenience init(pem: String) throws(PushCryptoError) {
        let key = try EVPKey(pem: pem, labels: ["PRIVATE KEY", "EC PRIVATE KEY"], wanted: "a P-256 private key")
        guard key.curve == SN_X9_62_prime256v1 else {
            throw PushCryptoError("the PEM holds \(key.kindDescription); a P-256 (prime256v1) EC key is needed")
        }
        self.init(key, hasPrivateKey: true)
    }

    /// From the raw 32-byte private scalar.
    public convenience init(privateScalar: Data) throws(PushCryptoError) {
        guard privateScalar.count == 32 else {
            throw PushCryptoError("a P-256 private scalar is 32 bytes, not \(privateScalar.count)")
        }
        guard let pointer = nh_p256_from_scalar([UInt8](privateScalar), 32) else {
            throw EVPKey.failure("the private scalar is not a P-256 key (zero, or not below the curve order)")
        }
        self.init(EVPKey(pointer), hasPrivateKey: true)
    }

    /// A public key only, from the 65-byte uncompressed point (a Web Push subscription's p256dh).
    public convenience init(publicPoint: Data) throws(PushCryptoError) {
        guard publicPoint.count == 65, publicPoint.first == 0x04 else {
            throw PushCryptoError(
                "a P-256 public key is 65 bytes starting 0x04 (uncompressed), not \(publicPoint.count) bytes")
        }
        guard let pointer = nh_p256_fromdata([UInt8](publicPoint), 65, nil) else {
            throw EVPKey.failure("the public key is not a point on the P-256 curve")
        }
        self.init(EVPKey(pointer), hasPrivateKey: false)
    }

    /// PKCS#8 PEM.
    public var privateKeyPEM: String {
        precondition(hasPrivateKey, "privateKeyPEM needs a private key; this one is a public point only")
        return key.privateKeyPEM
    }

    /// ES256 (RFC 7518 §3.4): ECDSA P-256 SHA-256, the signature as raw r || s, 64 bytes.
    public func signES256(_ message: Data) throws(PushCryptoError) -> Data {
        try requirePrivateKey("sign")
        let der = try key.sign(message)
        var raw = [UInt8](repeating: 0, count: 64)
        guard nh_ecdsa_der_to_raw([UInt8](der), der.count, &raw) == 1 else {
            throw EVPKey.failure("OpenSSL made an ECDSA signature that is not DER")
        }
        return Data(raw)
    }

    public func verifyES256(_ signature: Data, for message: Data) -> Bool {
        guard signature.count == 64 else { return false }
        var der = [UInt8](repeating: 0, count: 80)
        let length = nh_ecdsa_raw_to_der([UInt8](signature), &der)
        return length > 0 && key.verify(Data(der.prefix(Int(length))), for: message)
    }

    /// ECDH shared secret (32 bytes) with a peer's public key.
    public func sharedSecret(with peer: P256Key) throws(PushCryptoError) -> Data {
        try requirePrivateKey("derive a shared secret")
        guard let context = EVP_PKEY_CTX_new(key.pointer, nil) else { throw EVPKey.failure("out of memory") }
        defer { EVP_PKEY_CTX_free(context) }
        var length = 32
        var secret = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_derive_set_peer(context, peer.key.pointer) == 1,
            EVP_PKEY_derive(context, &secret, &length) == 1, length == 32
        else {
            throw EVPKey.failure("ECDH with the peer's public key failed")
        }
        return Data(secret)
    }

    private func requirePrivateKey(_ action: String) throws(PushCryptoError) {
        guard hasPrivateKey else { throw PushCryptoError("cannot \(action) with a public key alone") }
    }
}

/// An RSA private key for RS256 (a Google service account's private_key).
public final class RSAKey: Sendable {
    let key: EVPKey

    /// PKCS#8 "BEGIN PRIVATE KEY" or PKCS#1 "BEGIN RSA PRIVATE KEY", of at least 2048 bits.
    public init(pem: String) throws(PushCryptoError) {
        key = try EVPKey(pem: pem, labels: ["PRIVATE KEY", "RSA PRIVATE KEY"], wanted: "an RSA private key")
        guard EVP_PKEY_get_base_id(key.pointer) == EVP_PKEY_RSA else {
            throw PushCryptoError("the PEM holds \(key.kindDescription); an RSA key is needed")
        }
        let bits = EVP_PKEY_get_bits(key.pointer)
        guard bits >= 2048 else { throw PushCryptoError("the RSA key has \(bits) bits; RS256 needs at least 2048") }
    }

    /// RSASSA-PKCS1-v1_5 SHA-256.
    public func signRS256(_ message: Data) throws(PushCryptoError) -> Data { try key.sign(message) }

    public func verifyRS256(_ signature: Data, for message: Data) -> Bool { key.verify(signature, for: message) }
}

/// Owns an EVP_PKEY: loading from PEM, SHA-256 signatures in the key type's default scheme
/// (ECDSA as DER, RSA as PKCS#1 v1.5), and PKCS#8 output. An EVP_PKEY is not changed after it is
/// made, and OpenSSL allows concurrent use of one through separate contexts.
final class EVPKey: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }

    deinit { EVP_PKEY_free(pointer) }

    /// The first PEM block whose label is one of `labels`, as a private key; `wanted` names the
    /// key in messages ("a P-256 private key").
    convenience init(pem: String, labels: Set<String>, wanted: String) throws(PushCryptoError) {
        let blocks = PEMBlock.all(in: pem)
        guard let block = blocks.first(where: { labels.contains($0.label) }) else {
            throw PushCryptoError(PEMBlock.refusal(blocks.map(\.label), wanted: wanted, accepted: labels))
        }
        guard !block.text.contains("Proc-Type: 4,ENCRYPTED") else {
            throw PushCryptoError("the \(block.label) is encrypted; give \(wanted) without a passphrase")
        }
        let read: OpaquePointer? = Array(block.text.utf8).withUnsafeBytes { bytes in
            guard let bio = BIO_new_mem_buf(bytes.baseAddress, Int32(bytes.count)) else { return nil }
            defer { BIO_free(bio) }
            // A callback that gives no passphrase, so OpenSSL never asks on the terminal.
            return PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in 0 }, nil)
        }
        guard let pointer = read else {
            throw Self.failure("the PEM's BEGIN \(block.label) block does not decode as a key (bad base64 or DER)")
        }
        self.init(pointer)
    }

    /// The curve name of an EC key ("prime256v1"), nil for other key types.
    var curve: String? {
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_EC else { return nil }
        var name = [CChar](repeating: 0, count: 64)
        guard nh_pkey_group_name(pointer, &name, name.count) == 1 else { return nil }
        return String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// "an RSA key of 2048 bits", "an EC key on secp384r1", for messages.
    var kindDescription: String {
        let type = EVP_PKEY_get_base_id(pointer)
        if type == EVP_PKEY_RSA { return "an RSA key of \(EVP_PKEY_get_bits(pointer)) bits" }
        if type == EVP_PKEY_EC { return "an EC key on \(curve ?? "explicit parameters")" }
        return "a \(EVP_PKEY_get0_type_name(pointer).map { String(cString: $0) } ?? "non-EC, non-RSA") key"
    }

    func sign(_ message: Data) throws(PushCryptoError) -> Data {
        guard let context = EVP_MD_CTX_new() else { throw Self.failure("out of memory") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, pointer) == 1 else {
            throw Self.failure("the key cannot sign")
        }
        let bytes = [UInt8](message)
        var length = 0
        guard EVP_DigestSign(context, nil, &length, bytes, bytes.count) == 1 else { throw Self.failure("signing failed") }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &signature, &length, bytes, bytes.count) == 1 else {
            throw Self.failure("signing failed")
        }
        return Data(signature.prefix(length))
    }

    func verify(_ signature: Data, for message: Data) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        let verified =
            EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, pointer) == 1
            && EVP_DigestVerify(context, [UInt8](signature), signature.count, [UInt8](message), message.count) == 1
        // A bad signature leaves errors queued on this thread; they are not news to anyone.
        if !verified { ERR_clear_error() }
        return verified
    }

    var privateKeyPEM: String {
        guard let bio = BIO_new(BIO_s_mem()) else { fatalError("out of memory") }
        defer { BIO_free(bio) }
        let written = PEM_write_bio_PrivateKey(bio, pointer, nil, nil, 0, nil, nil)
        precondition(written == 1, "OpenSSL wrote no PEM")
        var text = [UInt8](repeating: 0, count: Int(BIO_ctrl_pending(bio)))
        let count = BIO_read(bio, &text, Int32(text.count))
        return String(decoding: text.prefix(Int(max(count, 0))), as: UTF8.self)
    }

    /// An error with `message`, clearing what OpenSSL queued on this thread about it.
    static func failure(_ message: String) -> PushCryptoError {
        ERR_clear_error()
        return PushCryptoError(message)
    }
}

/// One "-----BEGIN label-----" … "-----END label-----" block of a PEM text.
struct PEMBlock {
    let label: String
    let text: String

    static func all(in pem: String) -> [PEMBlock] {
        var blocks: [PEMBlock] = []
        var open: (label: String, lines: [String])?
        for line in pem.split(whereSeparator: \.isNewline).map({ $0.trimmingCharacters(in: .whitespaces) }) {
            if let label = Self.label(line, "BEGIN") {
                open = (label, [line])
            } else if var current = open {
                current.lines.append(line)
                open = current
                if Self.label(line, "END") == current.label {
                    blocks.append(PEMBlock(label: current.label, text: current.lines.joined(separator: "\n") + "\n"))
                    open = nil
                }
            }
        }
        return blocks
    }

    private static func label(_ line: String, _ marker: String) -> String? {
        let prefix = "-----\(marker) "
        guard line.hasPrefix(prefix), line.hasSuffix("-----"), line.count > prefix.count + 5 else { return nil }
        return String(line.dropFirst(prefix.count).dropLast(5))
    }

    /// Why none of the blocks labelled `found` is accepted.
    static func refusal(_ found: [String], wanted: String, accepted: Set<String>) -> String {
        let expected = accepted.sorted().map { "BEGIN \($0)" }.joined(separator: " or ")
        guard !found.isEmpty else {
            return "not a PEM key: no complete -----BEGIN …----- block; \(wanted) is needed (\(expected))"
        }
        let named = found.map { "BEGIN \($0)" }.joined(separator: ", ")
        if found.contains("ENCRYPTED PRIVATE KEY") {
            return "the PEM holds an encrypted key (\(named)); give \(wanted) without a passphrase (\(expected))"
        }
        if found.contains("RSA PRIVATE KEY") { return "the PEM holds an RSA key (\(named)); \(wanted) is needed" }
        if found.contains("EC PRIVATE KEY") { return "the PEM holds an EC key (\(named)); \(wanted) is needed" }
        return "the PEM holds \(named), not \(wanted) (\(expected))"
    }
}
