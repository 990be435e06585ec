import Foundation
import ServiceKit

/// The store's totals scan its tables: read at most once a second, however often health is asked.
struct StoreTotals {
    private var totals: [String: String] = [:]
    private var readAt = ContinuousClock.now - .seconds(60)

    mutating func read(_ store: any DeliveryStore, logger: Logger) -> [String: String] {
        if readAt.duration(to: .now) > .seconds(1) {
            do {
                totals = try store.totals()
            } catch {
                logger.warning("cannot read the store's totals for health", ("error", "\(error)"))
            }
            readAt = .now
        }
        return totals
    }
}
