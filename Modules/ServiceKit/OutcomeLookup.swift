import Foundation
import HubProtocol

/// Where a notification's outcome is: the dispatcher once it has pulled the notification, the
/// publish service before that (accepted, scheduled or canceled).
public enum OutcomeLookup {
    public static func find(_ notificationId: String, dispatch: any ServiceCalling, publish: any ServiceCalling) throws -> NotificationOutcome {
        do {
            return try dispatch.call(OutcomeRequest(notificationId: notificationId), auth: nil)
        } catch let error as HubError where error.code == .notFound {
            return try publish.call(OutcomeRequest(notificationId: notificationId), auth: nil)
        }
    }

    /// A test send's outcome and the results of its first targets, once the dispatcher has
    /// planned it and those targets have answered, or whatever there is after `seconds`.
    public static func waitForTest(
        _ notificationId: String, dispatch: any ServiceCalling, publish: any ServiceCalling, seconds: TimeInterval
    ) -> (outcome: NotificationOutcome?, results: [TestResult]) {
        let deadline = Date().addingTimeInterval(seconds)
        var outcome: NotificationOutcome?
        var results: [TestResult] = []
        while true {
            // A poll until the deadline: a failed ask keeps what the last one found.
            outcome = (try? find(notificationId, dispatch: dispatch, publish: publish)) ?? outcome
            if let state = outcome?.state, [.completed, .noTargetFound, .abandoned].contains(state) {
                // Likewise: the results of the last ask that answered stand.
                results = (try? dispatch.call(TestResultsRequest(notificationId: notificationId), auth: nil).results) ?? results
                if results.allSatisfy({ $0.outcome != nil }) {
                    // Read again: the counts move in the same commits as the results, so now they agree.
                    // Likewise: an ask that fails keeps the outcome found before.
                    outcome = (try? find(notificationId, dispatch: dispatch, publish: publish)) ?? outcome
                    break
                }
            }
            if Date() >= deadline { break }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return (outcome, results)
    }
}
