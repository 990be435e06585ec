import HubProtocol

/// Where a notification's outcome is: the dispatcher once it has pulled the notification, the
/// publish service before that (accepted, scheduled or canceled).
public enum OutcomeLookup {
    public static func find(_ notificationId: String, dispatch: HubClient, publish: HubClient) throws -> NotificationOutcome {
        do {
            return try dispatch.call(OutcomeRequest(notificationId: notificationId))
        } catch let error as HubError where error.code == .notFound {
            return try publish.call(OutcomeRequest(notificationId: notificationId))
        }
    }
}
