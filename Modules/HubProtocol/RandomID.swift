import Foundation

/// Ids in the form of lowercase UUIDs, as the hub names notifications. Foundation's `UUID()`
/// opens, reads and closes /dev/urandom for each one; these take their random bytes from the
/// kernel's generator as `SystemRandomNumberGenerator` does (getrandom), and are written out
/// without the uppercase string and its lowercased copy.
public enum RandomID {
    /// A version 7 UUID (RFC 9562): the time in milliseconds since 1970 in its first 48 bits, then
    /// 74 random bits. Ids made later sort later (to the millisecond), so a store's index on them
    /// grows at its end: a commit of many new rows writes a few index pages rather than one page
    /// for each row, as random ids would. The random part keeps them unguessable.
    public static func timeOrdered(at date: Date = Date()) -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes: (UInt64, UInt64) = (generator.next(), generator.next())
        let milliseconds = UInt64(max(0, (date.timeIntervalSince1970 * 1_000).rounded(.down)))
        return withUnsafeMutableBytes(of: &bytes) { raw -> String in
            for index in 0..<6 { raw[index] = UInt8(truncatingIfNeeded: milliseconds >> (40 - 8 * UInt64(index))) }
            raw[6] = raw[6] & 0x0f | 0x70  // version 7
            raw[8] = raw[8] & 0x3f | 0x80  // RFC 9562 variant
            return text(raw)
        }
    }

    /// 16 bytes as a UUID's 36 characters, in lowercase.
    private static func text(_ raw: UnsafeMutableRawBufferPointer) -> String {
        let hex = Array("0123456789abcdef".utf8)
        return String(unsafeUninitializedCapacity: 36) { out in
            var at = 0
            for index in 0..<16 {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    out[at] = 0x2d
                    at += 1
                }
                out[at] = hex[Int(raw[index] >> 4)]
                out[at + 1] = hex[Int(raw[index] & 0x0f)]
                at += 2
            }
            return at
        }
    }
}
