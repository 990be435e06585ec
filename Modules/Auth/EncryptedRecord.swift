import Foundation
import HubProtocol

/// A user notification's content encrypted end to end: one record of the `aes128gcm` content
/// coding (RFC 8188) as Web Push encrypts it for a subscription (RFC 8291), base64url without
/// padding. Any Web Push library writes it for the user's key; the plaintext is a JSON object of the
/// post's content, `{"visual": {"title", "body"}, "raw"}`. The hub checks the framing and the size,
/// never what is inside.
public enum EncryptedRecord {
    /// The largest record, header included.
    public static let maxBytes = 65_536
    /// salt 16, rs 4, idlen 1, keyid 65 (the sender's public point, as RFC 8291 puts it there).
    public static let headerBytes = 86

    /// Throws `invalid_payload` (or `payload_too_large`) saying what is wrong with the record.
    public static func check(_ text: String) throws(HubError) {
        guard text.utf8.count <= (maxBytes * 4 + 2) / 3 else {
            throw HubError(.payloadTooLarge, "encrypted is over \(maxBytes) bytes; the limit is \(maxBytes)")
        }
        guard let bytes = decode(text) else {
            throw HubError(.invalidPayload, "encrypted must be base64url (A–Z a–z 0–9 - _, no padding) of an aes128gcm record")
        }
        try check(bytes: bytes, "encrypted")
    }

    /// The framing of a record given as bytes (a rich payload encrypted end to end); `name` is what
    /// the messages call it.
    public static func check(bytes: [UInt8], _ name: String) throws(HubError) {
        guard bytes.count >= headerBytes + 17 else {
            throw HubError(.invalidPayload, "\(name) is \(bytes.count) bytes: too short for the aes128gcm header (86 bytes) and a sealed record")
        }
        let recordSize = bytes[16..<20].reduce(0) { $0 << 8 | Int($1) }
        guard bytes[20] == 65, bytes[21] == 0x04 else {
            throw HubError(
                .invalidPayload,
                "\(name) is not an RFC 8291 record: its key id must be the sender's 65-byte public key (0x04, X, Y), as Web Push libraries write it")
        }
        guard recordSize >= 18, bytes.count - headerBytes <= recordSize else {
            throw HubError(.invalidPayload, "\(name) must hold one aes128gcm record of at most its record size (\(recordSize) bytes)")
        }
    }

    /// The bytes of base64url text, or nil when it is not that (base64url's alphabet alone, unpadded).
    public static func decode(_ text: String) -> [UInt8]? {
        guard text.utf8.allSatisfy(isBase64URL) else { return nil }
        return Data(base64URL: text).map { [UInt8]($0) }
    }

    private static func isBase64URL(_ byte: UInt8) -> Bool {
        (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || (0x30...0x39).contains(byte) || byte == 0x2D || byte == 0x5F
    }
}
