import Foundation

/// Random version 4 UUIDs in lowercase, as the hub names notifications. Foundation's `UUID()` opens,
/// reads and closes /dev/urandom for each one; these take their 16 bytes from the kernel's
/// generator as `SystemRandomNumberGenerator` does (getrandom), and are written out without the
/// uppercase string and its lowercased copy.
public enum RandomID {
    public static func uuid() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes: (UInt64, UInt64) = (generator.next(), generator.next())
        return withUnsafeMutableBytes(of: &bytes) { raw -> String in
            raw[6] = raw[6] & 0x0f | 0x40  // version 4
            raw[8] = raw[8] & 0x3f | 0x80  // RFC 4122 variant
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
}
