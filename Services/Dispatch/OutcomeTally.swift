import Foundation
import HubProtocol

/// How a notification's outcome row opens, when `record` writes it.
struct OutcomeOpening {
    var state: NotificationState
    var enqueuedAt: Date
    var at: Date
    var targets: Int
    var expired: Int
    /// The hub the notification was sent to; nil for the default hub.
    var hub: String? = nil
    /// Whether the row adds to what other dispatchers wrote for their shards, rather than being
    /// written once.
    var adds: Bool
}

/// Counts to add to one outcome.
struct OutcomeCounts: Equatable {
    var delivered = 0
    var acknowledged = 0
    var expired = 0
    var failed = 0

    var isZero: Bool { self == OutcomeCounts() }
}

/// One count of the outcomes per platform: a notification's platform and outcome name.
struct PlatformCountKey: Hashable, Comparable {
    var notificationId: String
    var platform: String
    var outcome: String

    static func < (a: Self, b: Self) -> Bool {
        (a.notificationId, a.platform, a.outcome) < (b.notificationId, b.platform, b.outcome)
    }
}

/// The outcome counts a write changes, gathered while it runs and written at its end, each
/// notification's once and in the order of their ids: dispatchers sharing a database then take
/// the locks of the outcome rows they share in the same order, and never wait on each other in a cycle.
struct OutcomeTally {
    var openings: [String: OutcomeOpening] = [:]
    var counts: [String: OutcomeCounts] = [:]
    /// Platform counts `record` opens (once, or added to what other dispatchers wrote), and those
    /// later answers add.
    var platformOpenings: [PlatformCountKey: (count: Int, adds: Bool)] = [:]
    var platformAdds: [PlatformCountKey: Int] = [:]

    /// One statement of `writeTally`: outcome rows opened together (consecutive ids, all written
    /// once or all added to), or one notification's counts added.
    enum Step: Equatable {
        case open(adds: Bool, ids: [String])
        case count(String)
    }

    /// The statements that write the outcome rows, in the order of their ids: openings go up to
    /// `rowsPerStatement` to a statement, and a run of them ends before an id with counts only,
    /// so every statement after locks rows past those locked before. A notification's counts
    /// follow the statement that opens its row.
    func outcomeSteps(rowsPerStatement: Int) -> [Step] {
        var steps: [Step] = []
        var run: (adds: Bool, ids: [String])?
        var runCounts: [String] = []
        func endRun() {
            if let run { steps.append(.open(adds: run.adds, ids: run.ids)) }
            steps += runCounts.map(Step.count)
            run = nil
            runCounts = []
        }
        for id in Set(openings.keys).union(counts.keys).sorted() {
            let counted = counts[id].map { !$0.isZero } ?? false
            if let opening = openings[id] {
                if let current = run, current.adds != opening.adds || current.ids.count >= rowsPerStatement { endRun() }
                if run == nil { run = (opening.adds, []) }
                run!.ids.append(id)
                if counted { runCounts.append(id) }
            } else if counted {
                endRun()
                steps.append(.count(id))
            }
        }
        endRun()
        return steps
    }

    mutating func open(_ notificationId: String, _ opening: OutcomeOpening) {
        guard var known = openings[notificationId] else {
            openings[notificationId] = opening
            return
        }
        guard opening.adds else { return }
        known.targets += opening.targets
        openings[notificationId] = known
    }

    mutating func add(_ notificationId: String, _ change: (inout OutcomeCounts) -> Void) {
        change(&counts[notificationId, default: OutcomeCounts()])
    }

    mutating func openPlatform(_ key: PlatformCountKey, count: Int, adds: Bool) {
        let known = platformOpenings[key]?.count ?? 0
        platformOpenings[key] = (adds || known == 0 ? known + count : known, adds)
    }

    mutating func countPlatform(_ notificationId: String, _ platform: String, _ outcome: String) {
        platformAdds[PlatformCountKey(notificationId: notificationId, platform: platform, outcome: outcome), default: 0] += 1
    }
}
