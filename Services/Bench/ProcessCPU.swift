import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The CPU time a process has used, from /proc/PID/stat: user and system time in clock ticks.
enum ProcessCPU {
    /// utime and stime, fields 14 and 15 of a /proc/PID/stat line. The command name (field 2) is
    /// in parentheses and may hold spaces and parentheses itself, so the fields are counted from
    /// the last ')': the state (field 3) comes first after it.
    static func ticks(stat line: String) -> (user: UInt64, system: UInt64)? {
        guard let close = line.lastIndex(of: ")") else { return nil }
        let fields = line[line.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        // fields[0] is field 3, so field 14 is fields[11] and field 15 is fields[12].
        guard fields.count > 12, let user = UInt64(fields[11]), let system = UInt64(fields[12]) else { return nil }
        return (user, system)
    }

    /// Clock ticks a second (sysconf(_SC_CLK_TCK)), 100 when it cannot be read.
    static let ticksPerSecond: Double = {
        let value = sysconf(Int32(_SC_CLK_TCK))
        return value > 0 ? Double(value) : 100
    }()

    /// User plus system seconds used by process `pid` so far; nil when it is gone.
    static func seconds(_ pid: Int32) -> Double? {
        guard let line = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let ticks = ticks(stat: line) else { return nil }
        return Double(ticks.user + ticks.system) / ticksPerSecond
    }

    /// The cost per delivery (CPU seconds, instructions) from a short and a long run of the same
    /// kind: the difference in cost over the difference in deliveries, so that what every run
    /// costs whatever its length (its start, its last commit, heartbeats while it waits) is not
    /// counted. Nil when the long run has no more deliveries than the short, or cost less.
    static func perDelivery(short: (cost: Double, deliveries: Int), long: (cost: Double, deliveries: Int)) -> Double? {
        let deliveries = long.deliveries - short.deliveries
        let cost = long.cost - short.cost
        guard deliveries > 0, cost >= 0 else { return nil }
        return cost / Double(deliveries)
    }

    /// What a reading gained between `before` and `after`; nil when either is unknown.
    static func growth<T: Numeric>(from before: T?, to after: T?) -> T? {
        guard let before, let after else { return nil }
        return after - before
    }

    /// CPU seconds per 1,000 of `count` (such as acknowledged deliveries); nil when nothing was counted.
    static func perThousand(cpuSeconds: Double, count: Int) -> Double? {
        guard count > 0 else { return nil }
        return cpuSeconds / (Double(count) / 1_000)
    }
}
