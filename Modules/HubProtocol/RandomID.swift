import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Ids in the form of lowercase UUIDs, as the hub names notifications. Foundation's `UUID()`
/// opens, reads and closes /dev/urandom for each one; these take their random bytes from the
/// kernel's generator as `SystemRandomNumberGenerator` does (getrandom), a kilobyte at a time
/// (`RandomPool`), and are written out without the uppercase string and its lowercased copy.
public enum RandomID {
    /// A version 7 UUID (RFC 9562): the time in milliseconds since 1970 in its first 48 bits, then
    /// 74 random bits. Ids made later sort later (to the millisecond), so a store's index on them
    /// grows at its end: a commit of many new rows writes a few index pages rather than one page
    /// for each row, as random ids would. The random part keeps them unguessable.
    public static func timeOrdered(at date: Date = Date()) -> String {
        var bytes = pool.withLock { $0.take() }
        let milliseconds = UInt64(max(0, (date.timeIntervalSince1970 * 1_000).rounded(.down)))
        return withUnsafeMutableBytes(of: &bytes) { raw -> String in
            for index in 0..<6 { raw[index] = UInt8(truncatingIfNeeded: milliseconds >> (40 - 8 * UInt64(index))) }
            raw[6] = raw[6] & 0x0f | 0x70  // version 7
            raw[8] = raw[8] & 0x3f | 0x80  // RFC 9562 variant
            return text(raw)
        }
    }

    private static let pool = Mutex(RandomPool())

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

/// Random bytes from the kernel's generator, fetched a kilobyte at a time (in calls of 256 bytes),
/// so that an accepted send's id costs no system call of its own. Bytes handed out are wiped from
/// the pool (`explicit_bzero`, which the optimiser keeps), so what is left in memory never tells an
/// id already made.
struct RandomPool {
    private var bytes = [UInt8](repeating: 0, count: 1_024)
    private var used = 1_024

    /// 16 bytes not handed out before.
    mutating func take() -> (UInt64, UInt64) {
        if used + 16 > bytes.count { refill() }
        defer { used += 16 }
        return bytes.withUnsafeMutableBytes { raw in
            let taken = (raw.loadUnaligned(fromByteOffset: used, as: UInt64.self), raw.loadUnaligned(fromByteOffset: used + 8, as: UInt64.self))
            explicit_bzero(raw.baseAddress! + used, 16)
            return taken
        }
    }

    private mutating func refill() {
        bytes.withUnsafeMutableBytes { raw in
            // getentropy: the kernel's generator (getrandom), at most 256 bytes a call.
            var filled = 0
            while filled < raw.count {
                let count = min(256, raw.count - filled)
                if getentropy(raw.baseAddress! + filled, count) == 0 {
                    filled += count
                } else {
                    // No getrandom: the standard library's generator, 8 bytes at a time.
                    var generator = SystemRandomNumberGenerator()
                    while filled < raw.count {
                        let word: UInt64 = generator.next()
                        for shift in 0..<min(8, raw.count - filled) {
                            raw[filled] = UInt8(truncatingIfNeeded: word >> (8 * UInt64(shift)))
                            filled += 1
                        }
                    }
                }
            }
        }
        used = 0
    }
}
