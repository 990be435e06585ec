import COpenSSL
import Foundation
import HubProtocol

/// Compact JWS (RFC 7515): base64url(header).base64url(claims).base64url(signature). Headers and claims
/// are JSON objects encoded with sorted keys and without escaped slashes, so output is deterministic.
/// "alg" and "typ": "JWT" are set in the header.
public enum JWT {
    public static func es256(
        header: [String: String], claims: [String: JSONValue], key: P256Key
    ) throws(PushCryptoError) -> String {
        try sign(header: header, algorithm: "ES256", claims: claims, signature: key.signES256)
    }

    public static func rs256(
        header: [String: String], claims: [String: JSONValue], key: RSAKey
    ) throws(PushCryptoError) -> String {
        try sign(header: header, algorithm: "RS256", claims: claims, signature: key.signRS256)
    }

    private static func sign(
        header: [String: String], algorithm: String, claims: [String: JSONValue],
        signature: (Data) throws(PushCryptoError) -> Data
    ) throws(PushCryptoError) -> String {
        var header = header
        header["alg"] = algorithm
        header["typ"] = "JWT"
        let input = "\(try json(header).base64URL).\(try json(claims).base64URL)"
        return "\(input).\(try signature(Data(input.utf8)).base64URL)"
    }

    private static func json(_ value: some Encodable) throws(PushCryptoError) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        do {
            return try encoder.encode(value)
        } catch {
            throw PushCryptoError("a JWT header or claim cannot be written as JSON: \(error)")
        }
    }
}

/// HKDF (RFC 5869) with HMAC-SHA256.
public enum HKDF {
    /// `length` bytes (at most 255 × 32) of output keying material.
    public static func sha256(salt: Data, ikm: Data, info: Data, length: Int) -> Data {
        precondition(length >= 0 && length <= 255 * 32, "HKDF-SHA256 gives at most 8160 bytes")
        // An absent salt is a string of HashLen zeros (RFC 5869 §2.2).
        let pseudorandomKey = Crypto.hmacSHA256(key: salt.isEmpty ? Data(count: 32) : salt, message: ikm)
        var output = Data()
        var block = Data()
        var counter: UInt8 = 1
        while output.count < length {
            block = Crypto.hmacSHA256(key: pseudorandomKey, message: block + info + [counter])
            output += block
            counter &+= 1
        }
        return Data(output.prefix(length))
    }
}

/// AES-128-GCM with a 12-byte nonce and a 16-byte tag, no associated data.
public enum AESGCM {
    /// ciphertext || 16-byte tag.
    public static func seal128(key: Data, nonce: Data, plaintext: Data) throws(PushCryptoError) -> Data {
        try crypt(encrypt: true, key: key, nonce: nonce, input: plaintext, tag: nil)
    }

    /// The plaintext of ciphertext || tag; throws when the tag does not match.
    public static func open128(key: Data, nonce: Data, sealed: Data) throws(PushCryptoError) -> Data {
        guard sealed.count >= tagLength else {
            throw PushCryptoError("AES-GCM sealed data is \(sealed.count) bytes, shorter than its 16-byte tag")
        }
        return try crypt(
            encrypt: false, key: key, nonce: nonce, input: sealed.dropLast(tagLength), tag: sealed.suffix(tagLength))
    }

    static let tagLength = 16

    /// Encrypts and appends the tag, or checks `tag` and decrypts.
    private static func crypt(encrypt: Bool, key: Data, nonce: Data, input: Data, tag: Data?) throws(PushCryptoError) -> Data {
        guard key.count == 16 else { throw PushCryptoError("an AES-128-GCM key is 16 bytes, not \(key.count)") }
        guard nonce.count == 12 else { throw PushCryptoError("an AES-GCM nonce is 12 bytes here, not \(nonce.count)") }
        guard let context = EVP_CIPHER_CTX_new() else { throw EVPKey.failure("out of memory") }
        defer { EVP_CIPHER_CTX_free(context) }
        let bytes = [UInt8](input)
        // Room for the tag after the ciphertext; never empty, so the buffer always has an address.
        var output = [UInt8](repeating: 0, count: bytes.count + tagLength)
        var length: Int32 = 0
        var finalLength: Int32 = 0
        guard EVP_CipherInit_ex(context, EVP_aes_128_gcm(), nil, [UInt8](key), [UInt8](nonce), encrypt ? 1 : 0) == 1,
            EVP_CipherUpdate(context, &output, &length, bytes, Int32(bytes.count)) == 1
        else {
            throw EVPKey.failure("AES-GCM could not start")
        }
        if var tag = tag.map({ [UInt8]($0) }) {
            guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(tagLength), &tag) == 1 else {
                throw EVPKey.failure("AES-GCM refused the tag")
            }
        }
        let finished = output.withUnsafeMutableBufferPointer { buffer in
            EVP_CipherFinal_ex(context, buffer.baseAddress! + Int(length), &finalLength) == 1
        }
        guard finished else {
            throw EVPKey.failure("the AES-GCM tag does not match: the data was altered, or the key or nonce is wrong")
        }
        let count = Int(length + finalLength)
        guard encrypt else { return Data(output.prefix(count)) }
        let tagStored = output.withUnsafeMutableBufferPointer { buffer in
            EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(tagLength), buffer.baseAddress! + count) == 1
        }
        guard tagStored else { throw EVPKey.failure("AES-GCM gave no tag") }
        return Data(output.prefix(count + tagLength))
    }
}
