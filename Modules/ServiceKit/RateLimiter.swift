import Foundation
import Synchronization

/// Token buckets by key: each key may take `perSecond` a second, in bursts of up to twice that.
/// Safe to use from several threads. Buckets of keys that have gone quiet are forgotten, so the
/// table stays as large as the set of keys active in the last minute.
public final class RateLimiter: Sendable {
    public let perSecond: Double
    public let burst: Double

    private struct Bucket {
        var tokens: Double
        var updated: TimeInterval
    }

    private let buckets = Mutex<(table: [String: Bucket], swept: TimeInterval)>(([:], 0))

    public init(perSecond: Int, burst: Int? = nil) {
        self.perSecond = Double(perSecond)
        self.burst = Double(burst ?? perSecond * 2)
    }

    /// Takes one token for `key`; false when the bucket is empty.
    public func allow(_ key: String, now: TimeInterval = ProcessInfo.processInfo.systemUptime) -> Bool {
        buckets.withLock { state in
            if now - state.swept > 60 {
                state.table = state.table.filter { now - $0.value.updated < 60 }
                state.swept = now
            }
            var bucket = state.table[key] ?? Bucket(tokens: burst, updated: now)
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * perSecond)
            bucket.updated = now
            let allowed = bucket.tokens >= 1
            if allowed { bucket.tokens -= 1 }
            state.table[key] = bucket
            return allowed
        }
    }

    /// Keys with a bucket now.
    public var count: Int { buckets.withLock { $0.table.count } }
}
