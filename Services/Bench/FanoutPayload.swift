import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The fan-out message body: "<send time in ns> <sequence> " padded to a fixed size. The send time
/// comes from CLOCK_MONOTONIC, which every process on the machine shares, so a subscriber process
/// can subtract it from its own reading; the sequence tells duplicates apart from new messages.
enum FanoutPayload {
    static let size = 256

    static func now() -> Int {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return time.tv_sec * 1_000_000_000 + time.tv_nsec
    }

    /// Fills `buffer` (at least `size` bytes) for message `sequence`, stamped with the current time.
    static func fill(_ buffer: UnsafeMutableRawBufferPointer, sequence: Int) {
        var header = Array("\(now()) \(sequence) ".utf8)
        if header.count > size { header.removeLast(header.count - size) }
        header.withUnsafeBytes { buffer.copyMemory(from: $0) }
        for offset in header.count..<size { buffer[offset] = UInt8(ascii: "x") }
    }

    /// The send time and sequence, or nil if the body is not one of ours.
    static func parse(_ bytes: UnsafeRawBufferPointer) -> (sent: Int, sequence: Int)? {
        var sent: Int?
        var value = 0
        var digits = 0
        for byte in bytes {
            if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") && digits < 19 {
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
                digits += 1
            } else if byte == UInt8(ascii: " ") && digits > 0 {
                if let sent { return (sent, value) }
                sent = value
                value = 0
                digits = 0
            } else {
                return nil
            }
        }
        return nil
    }
}
