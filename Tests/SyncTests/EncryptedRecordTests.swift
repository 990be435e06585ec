import Auth
import Foundation
import HubProtocol
import Testing

@testable import NHSync

/// The framing the hub checks of content encrypted end to end, and nothing inside it.
@Suite("Encrypted records")
struct EncryptedRecordTests {
    /// An aes128gcm header (salt, record size, key id length, a public point) and `sealed` bytes.
    static func record(recordSize: Int = 4096, keyIdLength: UInt8 = 65, point: UInt8 = 0x04, sealed: Int = 40) -> String {
        var bytes = [UInt8](repeating: 7, count: 16)
        bytes += withUnsafeBytes(of: UInt32(recordSize).bigEndian, Array.init)
        bytes += [keyIdLength, point] + [UInt8](repeating: 1, count: 64) + [UInt8](repeating: 9, count: sealed)
        return Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func refusal(_ text: String) -> HubError? {
        do {
            try EncryptedRecord.check(text)
            return nil
        } catch {
            return error
        }
    }

    @Test("one aes128gcm record with the sender's key as its key id passes, whatever it seals")
    func accepted() {
        #expect(Self.refusal(Self.record()) == nil)
        #expect(Self.refusal(Self.record(recordSize: 18, sealed: 17)) == nil)
    }

    @Test("what is not one RFC 8291 record is refused, saying why")
    func refused() throws {
        for (text, words) in [
            ("not base64!", "base64url"), (Self.record() + "=", "base64url"), ("QUJD", "too short"),
            (Self.record(sealed: 16), "too short"), (Self.record(keyIdLength: 16), "key id"), (Self.record(point: 0x02), "key id"),
            (Self.record(recordSize: 17), "record"), (Self.record(recordSize: 30, sealed: 40), "one aes128gcm record"),
        ] {
            let error = try #require(Self.refusal(text), "\(text.prefix(20))")
            #expect(error.code == .invalidPayload && error.message.contains(words), "\(error.message)")
        }
        let big = try #require(Self.refusal(String(repeating: "A", count: 90_000)))
        #expect(big.code == .payloadTooLarge)
    }
}
