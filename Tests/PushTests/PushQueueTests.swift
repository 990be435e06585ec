import Foundation
import HubProtocol
import Testing

@testable import Push

/// The push services' decisions, with an explicit clock and gates that answer as each test says:
/// what goes out, what waits for a pause, a backoff or a token, what is reported, and what is let go.
@Suite struct PushQueueTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// Senders as the queue sees them: each service's authorization, and the renewals asked for.
    final class Gates: PushGates {
        var authorizations: [PushService: PushAuthorization] = [.apple: .ready, .fcm: .ready, .browser: .ready]
        var renewed: [PushService] = []
        func authorization(_ service: PushService, now: Date) -> PushAuthorization? { authorizations[service] }
        func renew(_ service: PushService, now: Date) { renewed.append(service) }
    }

    static func message(_ id: String, _ platform: Platform = .apns, expiresIn: TimeInterval = 600) -> PushMessage {
        PushMessage(
            deliveryId: id, notificationId: "n1", installationId: "i-\(id)", platform: platform, pushChannel: "token-\(id)", payload: "{}",
            expiresAt: now.addingTimeInterval(expiresIn))
    }

    /// A queue whose backoff is the attempt count in seconds, so that due times are exact.
    static func queue() -> PushQueue {
        var queue = PushQueue()
        queue.backoff = { TimeInterval($0) }
        return queue
    }

    /// The delivery ids sent, in order.
    static func sent(_ steps: [PushStep]) -> [String] {
        steps.compactMap { if case .send(let message, _) = $0 { message.deliveryId } else { nil } }
    }

    static func reports(_ steps: [PushStep]) -> [String: PushResult] {
        Dictionary(uniqueKeysWithValues: steps.compactMap { if case .report(let message, let result) = $0 { (message.deliveryId, result) } else { nil } })
    }

    @Test func aDeliveryGoesOutOnceAndIsReportedOnce() {
        var queue = Self.queue()
        let gates = Gates()
        #expect(Self.sent(queue.submit(Self.message("a"), now: Self.now, gates: gates)) == ["a"])
        #expect(queue.submit(Self.message("a"), now: Self.now, gates: gates).isEmpty)
        #expect(queue.pending == 1)
        #expect(Self.reports(queue.answered("a", .delivered, now: Self.now, gates: gates)) == ["a": .delivered])
        #expect(queue.pending == 0)
        #expect(queue.answered("a", .delivered, now: Self.now, gates: gates).isEmpty)
        #expect(queue.counters[.apple]?.sent == 1)
        #expect(queue.counters[.apple]?.delivered == 1)
    }

    @Test func aPlatformWithoutPushServiceOrCredentialsFails() {
        var queue = Self.queue()
        let gates = Gates()
        gates.authorizations[.fcm] = nil
        let noPath = Self.reports(queue.submit(Self.message("g", .gcm), now: Self.now, gates: gates))
        #expect(noPath["g"] == .failed(outcome: "PnsUnavailable", reason: "the hub has no delivery path to gcm installations"))
        let noCredentials = Self.reports(queue.submit(Self.message("f", .fcmv1), now: Self.now, gates: gates))
        #expect(noCredentials["f"] == .failed(outcome: "PnsUnavailable", reason: "no credentials for fcm are configured"))
        #expect(queue.pending == 0)
        #expect(queue.counters[.fcm]?.failed == 1)
    }

    @Test func aRetryWithoutRetryAfterBacksOffByAttempts() {
        var queue = Self.queue()
        let gates = Gates()
        _ = queue.submit(Self.message("a"), now: Self.now, gates: gates)
        #expect(queue.answered("a", .retry(reason: "HTTP 503", after: nil), now: Self.now, gates: gates).isEmpty)
        // One attempt so far: due a second later, not before.
        #expect(queue.tick(now: Self.now.addingTimeInterval(0.5), gates: gates).isEmpty)
        #expect(Self.sent(queue.tick(now: Self.now.addingTimeInterval(1), gates: gates)) == ["a"])
        _ = queue.answered("a", .retry(reason: "HTTP 503", after: nil), now: Self.now.addingTimeInterval(1), gates: gates)
        #expect(queue.tick(now: Self.now.addingTimeInterval(2.5), gates: gates).isEmpty)
        #expect(Self.sent(queue.tick(now: Self.now.addingTimeInterval(3), gates: gates)) == ["a"])
        #expect(queue.counters[.apple]?.retried == 2)
        #expect(queue.counters[.apple]?.errors["503"] == 2)
    }

    @Test func retryAfterPausesTheWholeService() {
        var queue = Self.queue()
        let gates = Gates()
        _ = queue.submit(Self.message("a"), now: Self.now, gates: gates)
        _ = queue.answered("a", .retry(reason: "HTTP 429 TooManyRequests", after: 30), now: Self.now, gates: gates)
        // Another delivery to the same service waits for the pause; one to another service does not.
        #expect(queue.submit(Self.message("b"), now: Self.now.addingTimeInterval(1), gates: gates).isEmpty)
        #expect(Self.sent(queue.submit(Self.message("c", .fcmv1), now: Self.now.addingTimeInterval(1), gates: gates)) == ["c"])
        #expect(queue.tick(now: Self.now.addingTimeInterval(29), gates: gates).isEmpty)
        #expect(Set(Self.sent(queue.tick(now: Self.now.addingTimeInterval(30), gates: gates))) == ["a", "b"])
        #expect(queue.counters[.apple]?.errors["TooManyRequests"] == 1)
    }

    @Test func aDeliveryPastItsExpiryIsLetGoWithoutAReport() {
        var queue = Self.queue()
        let gates = Gates()
        _ = queue.submit(Self.message("a", expiresIn: 10), now: Self.now, gates: gates)
        // The service asks for a minute; the retry is due at the expiry, and is let go then.
        _ = queue.answered("a", .retry(reason: "HTTP 503", after: 60), now: Self.now, gates: gates)
        #expect(queue.tick(now: Self.now.addingTimeInterval(10), gates: gates).isEmpty)
        #expect(queue.pending == 0)
        #expect(queue.tick(now: Self.now.addingTimeInterval(61), gates: gates).isEmpty)
    }

    @Test func deliveriesWaitForTheTokenAndGoOnceItComes() {
        var queue = Self.queue()
        let gates = Gates()
        let tokenRequest = PushHTTPRequest(url: "https://oauth2.example/token", headers: [], body: Data())
        gates.authorizations[.fcm] = .fetch(tokenRequest)
        let first = queue.submit(Self.message("a", .fcmv1), now: Self.now, gates: gates)
        guard case .fetchToken(.fcm, let request)? = first.first else {
            Issue.record("expected a token request, got \(first)")
            return
        }
        #expect(request.url == tokenRequest.url)
        gates.authorizations[.fcm] = .waiting
        #expect(queue.submit(Self.message("b", .fcmv1), now: Self.now, gates: gates).isEmpty)
        gates.authorizations[.fcm] = .ready
        let steps = queue.tokenAnswered(.fcm, problem: nil, retryAfter: nil, now: Self.now, gates: gates)
        #expect(Self.sent(steps) == ["a", "b"])
        #expect(queue.counters[.fcm]?.tokenRequests == 1)
    }

    @Test func aRefusedTokenHoldsDeliveriesBackWithoutFailingThem() {
        var queue = Self.queue()
        let gates = Gates()
        gates.authorizations[.fcm] = .fetch(PushHTTPRequest(url: "https://oauth2.example/token", headers: [], body: Data()))
        _ = queue.submit(Self.message("a", .fcmv1), now: Self.now, gates: gates)
        let steps = queue.tokenAnswered(.fcm, problem: "HTTP 400 invalid_grant", retryAfter: nil, now: Self.now, gates: gates)
        #expect(Self.reports(steps).isEmpty)
        guard case .note(let text, let fields)? = steps.first else {
            Issue.record("expected a note, got \(steps)")
            return
        }
        #expect(text.contains("token refused"))
        #expect(fields.contains { $0 == ("problem", "HTTP 400 invalid_grant") })
        #expect(queue.pending == 1)
        #expect(queue.counters[.fcm]?.errors["token"] == 1)
        // Tried again after 5 s when the service gave no Retry-After.
        gates.authorizations[.fcm] = .ready
        #expect(queue.tick(now: Self.now.addingTimeInterval(4.9), gates: gates).isEmpty)
        #expect(Self.sent(queue.tick(now: Self.now.addingTimeInterval(5), gates: gates)) == ["a"])
    }

    @Test func aRefusedTokenIsRenewedOnceAndARefusalOfTheNewOneFailsAsInvalidCredentials() {
        var queue = Self.queue()
        let gates = Gates()
        _ = queue.submit(Self.message("a"), now: Self.now, gates: gates)
        _ = queue.submit(Self.message("b"), now: Self.now, gates: gates)
        // Both were refused with the old token: each is sent again once with a new one, and the
        // token is dropped once: b's refusal is of the token a's already dropped.
        #expect(Self.sent(queue.answered("a", .renewCredentials(reason: "HTTP 403 ExpiredProviderToken"), now: Self.now, gates: gates)) == ["a"])
        #expect(Self.sent(queue.answered("b", .renewCredentials(reason: "HTTP 403 ExpiredProviderToken"), now: Self.now, gates: gates)) == ["b"])
        #expect(gates.renewed == [.apple])
        #expect(Self.reports(queue.answered("b", .delivered, now: Self.now, gates: gates)) == ["b": .delivered])
        // The new token is refused too: the credentials are wrong, and the delivery says so.
        let failed = queue.answered("a", .renewCredentials(reason: "HTTP 403 InvalidProviderToken"), now: Self.now, gates: gates)
        #expect(Self.reports(failed) == ["a": .failed(outcome: "InvalidCredentials", reason: "HTTP 403 InvalidProviderToken")])
        #expect(gates.renewed.count == 1)
        #expect(queue.counters[.apple]?.errors["ExpiredProviderToken"] == 2 && queue.counters[.apple]?.failed == 1)
    }

    @Test func aDeliverySentAfterARenewalAndRefusedDropsTheNewTokenToo() {
        var queue = Self.queue()
        let gates = Gates()
        let later = Self.now.addingTimeInterval(60)
        _ = queue.submit(Self.message("a"), now: Self.now, gates: gates)
        _ = queue.answered("a", .renewCredentials(reason: "HTTP 401 InvalidToken"), now: Self.now.addingTimeInterval(1), gates: gates)
        #expect(gates.renewed == [.apple])
        // c goes out with the token fetched after a's refusal; when that one is refused in turn,
        // it is dropped: it is not the one a's refusal already dropped.
        _ = queue.submit(Self.message("c"), now: later, gates: gates)
        #expect(Self.sent(queue.answered("c", .renewCredentials(reason: "HTTP 401 InvalidToken"), now: later.addingTimeInterval(1), gates: gates)) == ["c"])
        #expect(gates.renewed == [.apple, .apple])
    }

    @Test func aRequestThatCouldNotBeMadeIsCountedByItsOutcomeNeverByItsText() {
        var queue = Self.queue()
        let gates = Gates()
        _ = queue.submit(Self.message("a"), now: Self.now, gates: gates)
        _ = queue.unsendable("a", PushRequestError(outcome: "PnsInterfaceError", reason: "an adm message has no member 'x1'"))
        #expect(queue.counters[.apple]?.errors == ["PnsInterfaceError": 1])
        #expect(PushQueue.code("the body is 5001 bytes") == "RequestError")
    }

    @Test func anExpiredChannelAndAFailureAreCountedByTheServicesCode() {
        var queue = Self.queue()
        let gates = Gates()
        _ = queue.submit(Self.message("a"), now: Self.now, gates: gates)
        _ = queue.submit(Self.message("b"), now: Self.now, gates: gates)
        let gone = queue.answered("a", .channelExpired(reason: "HTTP 410 Unregistered"), now: Self.now, gates: gates)
        #expect(Self.reports(gone) == ["a": .channelExpired(reason: "HTTP 410 Unregistered")])
        _ = queue.answered("b", .failed(outcome: "BadChannel", reason: "HTTP 400 BadDeviceToken"), now: Self.now, gates: gates)
        let counters = queue.counters[.apple]
        #expect(counters?.expiredChannels == 1)
        #expect(counters?.failed == 1)
        #expect(counters?.errors == ["Unregistered": 1, "BadDeviceToken": 1])
    }

    @Test func aRequestThatCannotBeMadeFails() {
        var queue = Self.queue()
        let gates = Gates()
        _ = queue.submit(Self.message("a", .browser), now: Self.now, gates: gates)
        let steps = queue.unsendable("a", PushRequestError(outcome: "InvalidNotificationSize", reason: "over 4,078 bytes"))
        #expect(Self.reports(steps) == ["a": .failed(outcome: "InvalidNotificationSize", reason: "over 4,078 bytes")])
        #expect(queue.pending == 0)
    }

    @Test func credentialsRemovedWhileADeliveryWaitsFailIt() {
        var queue = Self.queue()
        let gates = Gates()
        _ = queue.submit(Self.message("a"), now: Self.now, gates: gates)
        gates.authorizations[.apple] = nil
        // The answer comes when the service has no sender any more: tried again, and failed.
        let steps = queue.answered("a", nil, now: Self.now, gates: gates)
        #expect(Self.reports(steps) == ["a": .failed(outcome: "PnsUnavailable", reason: "no credentials for apple are configured")])
    }

    @Test func backoffGrowsToAMinuteWithATenthEitherWay() {
        for (attempts, base) in [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (7, 60.0), (30, 60.0)] {
            let delay = PushQueue.backoff(attempts: attempts)
            #expect(delay >= base * 0.9 && delay <= base * 1.1, "attempts \(attempts): \(delay)")
        }
    }
}
