import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Dates on the wire: ISO 8601 in UTC with milliseconds, such as 2026-01-31T12:00:00.000Z.
/// Reading also takes the form without fractional seconds.
public enum WireDate {
    static let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
    static let plain = Date.ISO8601FormatStyle()

    /// The date to the nearest millisecond, as `2026-01-31T12:00:00.250Z`. Foundation's style with
    /// fractional seconds cuts the fraction off instead, so a date read back from its own text (a
    /// binary fraction a hair below the decimal one) would be written a millisecond earlier each
    /// time it went through the codec; rounding writes it back the same.
    public static func format(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1_000).rounded()
        guard milliseconds.magnitude < 1e15 else { return date.formatted(withFraction) }
        let whole = Int64(milliseconds)
        let seconds = whole >= 0 ? whole / 1_000 : (whole - 999) / 1_000
        let fraction = Int(whole - seconds * 1_000)
        if let text = written(seconds: seconds, milliseconds: fraction) { return text }
        var text = Date(timeIntervalSince1970: Double(seconds)).formatted(plain)
        guard text.last == "Z" else { return date.formatted(withFraction) }
        text.removeLast()
        let digits = String(fraction)
        return text + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
    }

    /// `format`'s text for a second from 1970 through 9999 and its milliseconds, from the
    /// days' civil date (Hinnant's `civil_from_days`); nil for any other second, which Foundation's
    /// style writes. Every announcement of a send writes two of these.
    static func written(seconds: Int64, milliseconds: Int) -> String? {
        guard seconds >= 0, seconds < 253_402_300_800, (0..<1_000).contains(milliseconds) else { return nil }
        let days = seconds / 86_400, time = Int(seconds % 86_400)
        let shifted = days + 719_468
        let era = shifted / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * monthFromMarch + 2) / 5 + 1)
        let month = Int(monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9)
        let year = Int(yearOfEra + era * 400 + (month <= 2 ? 1 : 0))
        return String(unsafeUninitializedCapacity: 24) { text in
            func put(_ value: Int, _ at: Int, _ width: Int) {
                var value = value
                for index in stride(from: at + width - 1, through: at, by: -1) {
                    text[index] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
            }
            put(year, 0, 4)
            text[4] = UInt8(ascii: "-")
            put(month, 5, 2)
            text[7] = UInt8(ascii: "-")
            put(day, 8, 2)
            text[10] = UInt8(ascii: "T")
            put(time / 3_600, 11, 2)
            text[13] = UInt8(ascii: ":")
            put(time / 60 % 60, 14, 2)
            text[16] = UInt8(ascii: ":")
            put(time % 60, 17, 2)
            text[19] = UInt8(ascii: ".")
            put(milliseconds, 20, 3)
            text[23] = UInt8(ascii: "Z")
            return 24
        }
    }

    public static func parse(_ text: String) -> Date? {
        if let date = parseWritten(text) { return date }
        // Parse or nil: nil means not a date in either form.
        return (try? withFraction.parse(text)) ?? (try? plain.parse(text))
    }

    /// A date in the form `format` writes, or the same without its fraction, read from its digits
    /// (`timegm` turns the fields into seconds): several times faster than Foundation's parser, which
    /// reads anything else (another form, a field out of its range, a year before 1970) as before.
    static func parseWritten(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { bytes -> Date? in
            let count = bytes.count
            guard count == 20 || count == 24, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
                bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[count - 1] == UInt8(ascii: "Z"),
                count == 20 || bytes[19] == UInt8(ascii: ".")
            else { return nil }
            func number(_ start: Int, _ width: Int) -> Int32? {
                var value: Int32 = 0
                for index in start..<(start + width) {
                    guard bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") else { return nil }
                    value = value * 10 + Int32(bytes[index] - UInt8(ascii: "0"))
                }
                return value
            }
            guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2), let hour = number(11, 2),
                let minute = number(14, 2), let second = number(17, 2), let milliseconds = count == 24 ? number(20, 3) : 0,
                year >= 1970, (1...12).contains(month), day >= 1, hour < 24, minute < 60, second < 60
            else { return nil }
            var fields = tm()
            fields.tm_year = year - 1900
            fields.tm_mon = month - 1
            fields.tm_mday = day
            fields.tm_hour = hour
            fields.tm_min = minute
            fields.tm_sec = second
            let seconds = timegm(&fields)
            // timegm carries a day past the month's end into the next month; such a date is Foundation's to read.
            guard seconds != -1, fields.tm_mday == day, fields.tm_mon == month - 1 else { return nil }
            // From the reference date, as Foundation's parser counts, so that both give the same date.
            return Date(timeIntervalSinceReferenceDate: Double(Int(seconds) - 978_307_200) + Double(milliseconds) / 1_000)
        }
    }
}
