import DispatchCore
import Foundation
import HubProtocol

/// What the queue asks of each push service's sender: whether it can send now, and to drop a
/// token the service refused. `PushCenter` answers from its senders; tests answer as they like.
protocol PushGates {
    /// nil when the service has no credentials.
    func authorization(_ service: PushService, now: Date) -> PushAuthorization?
    func renew(_ service: PushService, now: Date)
}

/// What the queue decided, for `PushCenter` to carry out.
enum PushStep {
    /// Make the delivery's request and send it; its answer comes back to `answered`.
    case send(PushMessage, PushService)
    /// Send the request for the service's token; its answer comes back to `tokenAnswered`.
    case fetchToken(PushService, PushHTTPRequest)
    /// The delivery is done: delivered, its channel expired, or failed for good.
    case report(PushMessage, PushResult)
    /// Something worth a log line.
    case note(String, [(String, String)])
}

/// The push services' decisions, with an explicit `now` and no I/O: which delivery goes out,
/// which waits for a token, a pause a service asked for, or its retry; and what each answer
/// means. A delivery taken is reported once, when the service took it or it cannot be taken;
/// one that may go later (throttled, a server error, no answer) is sent again, after the
/// service's Retry-After when it gave one and with a growing delay when not, until it expires,
/// when it is let go without a report (the store counts it as expired).
struct PushQueue {
    private struct Entry {
        var message: PushMessage
        var attempts = 0
        var service: PushService
        /// Its service's token was renewed after a refusal of this delivery.
        var renewed = false
        /// When it last went out.
        var sentAt: Date?
    }

    private(set) var counters: [PushService: PushCounters] = [:]
    private var entries: [String: Entry] = [:]
    private var retries = DueQueue<String>()
    private var waitingForToken: [PushService: [String]] = [:]
    private var pausedUntil: [PushService: Date] = [:]
    /// When each service's token was last dropped after a refusal.
    private var renewedAt: [PushService: Date] = [:]
    /// Seconds before the next attempt after `attempts` tries; jittered by default.
    var backoff: (Int) -> TimeInterval = { PushQueue.backoff(attempts: $0) }

    /// Deliveries taken and not yet reported.
    var pending: Int { entries.count }

    /// Takes a delivery; one already taken is not taken twice.
    mutating func submit(_ message: PushMessage, now: Date, gates: some PushGates) -> [PushStep] {
        guard entries[message.deliveryId] == nil else { return [] }
        guard let service = PushService(platform: message.platform) else {
            return [.report(message, .failed(outcome: "PnsUnavailable", reason: "the hub has no delivery path to \(message.platform.rawValue) installations"))]
        }
        entries[message.deliveryId] = Entry(message: message, service: service)
        return attempt(message.deliveryId, now: now, gates: gates)
    }

    /// What is due again by `now`.
    mutating func tick(now: Date, gates: some PushGates) -> [PushStep] {
        retries.popDue(now: now, limit: 10_000).flatMap { attempt($0, now: now, gates: gates) }
    }

    /// A delivery's answer, classified by its sender: nil when the service has no sender now.
    mutating func answered(_ id: String, _ result: PushResult?, now: Date, gates: some PushGates) -> [PushStep] {
        guard let entry = entries[id] else { return [] }
        guard let result else { return attempt(id, now: now, gates: gates) }
        let service = entry.service
        switch result {
        case .delivered, .channelMoved, .channelExpired, .failed:
            return finish(id, result)
        case .retry(let reason, let after):
            counters[service, default: PushCounters()].retried += 1
            counters[service, default: PushCounters()].errors[Self.code(reason), default: 0] += 1
            if let after {
                // The service asked everyone to wait: nothing more goes to it until then.
                pausedUntil[service] = max(pausedUntil[service] ?? now, now.addingTimeInterval(after))
                schedule(id, at: now.addingTimeInterval(after))
            } else {
                schedule(id, at: now.addingTimeInterval(backoff(entry.attempts)))
            }
            return []
        case .renewCredentials(let reason):
            counters[service, default: PushCounters()].errors[Self.code(reason), default: 0] += 1
            // Refused once more with a token fetched after the first refusal: the credentials are wrong.
            guard !entry.renewed else { return finish(id, .failed(outcome: "InvalidCredentials", reason: reason)) }
            entries[id]?.renewed = true
            // A refusal of a token already dropped since this delivery went out (others sent with
            // it came back first) is not a reason to drop the new one: it is tried with that.
            if let renewed = renewedAt[service], let sentAt = entry.sentAt, renewed >= sentAt {
                return attempt(id, now: now, gates: gates)
            }
            renewedAt[service] = now
            gates.renew(service, now: now)
            return attempt(id, now: now, gates: gates)
        }
    }

    /// The token endpoint's answer: `problem` is nil when a token came. Deliveries that waited go
    /// out, or, when the token was refused, are held back (not failed: credentials can be fixed
    /// while they wait) until the service's Retry-After or 5 s.
    mutating func tokenAnswered(_ service: PushService, problem: String?, retryAfter: TimeInterval?, now: Date, gates: some PushGates) -> [PushStep] {
        let waiting = waitingForToken.removeValue(forKey: service) ?? []
        if let problem {
            counters[service, default: PushCounters()].errors["token", default: 0] += 1
            for id in waiting { schedule(id, at: now.addingTimeInterval(retryAfter ?? 5)) }
            return [.note("push service token refused; trying again", [("service", service.rawValue), ("problem", problem)])]
        }
        return waiting.flatMap { attempt($0, now: now, gates: gates) }
    }

    /// What a service said of an answer beside its status, counted (`PushCounters.answers`).
    mutating func noted(_ service: PushService, _ said: [String]) {
        for text in said { counters[service, default: PushCounters()].answers[text, default: 0] += 1 }
    }

    /// A request that could not be made: the delivery fails for good.
    mutating func unsendable(_ id: String, _ error: PushRequestError) -> [PushStep] {
        finish(id, .failed(outcome: error.outcome, reason: error.reason))
    }

    private mutating func attempt(_ id: String, now: Date, gates: some PushGates) -> [PushStep] {
        guard let entry = entries[id] else { return [] }
        // Past its time to live it is not sent; the store counts it as expired.
        guard entry.message.expiresAt > now else {
            entries[id] = nil
            return []
        }
        let service = entry.service
        guard let authorization = gates.authorization(service, now: now) else {
            return finish(id, .failed(outcome: "PnsUnavailable", reason: "no credentials for \(service.rawValue) are configured"))
        }
        if let paused = pausedUntil[service], paused > now {
            schedule(id, at: paused)
            return []
        }
        switch authorization {
        case .ready:
            entries[id]?.attempts += 1
            entries[id]?.sentAt = now
            counters[service, default: PushCounters()].sent += 1
            return [.send(entry.message, service)]
        case .waiting:
            waitingForToken[service, default: []].append(id)
            return []
        case .fetch(let request):
            waitingForToken[service, default: []].append(id)
            counters[service, default: PushCounters()].tokenRequests += 1
            return [.fetchToken(service, request)]
        }
    }

    private mutating func finish(_ id: String, _ result: PushResult) -> [PushStep] {
        guard let entry = entries.removeValue(forKey: id) else { return [] }
        var counter = counters[entry.service, default: PushCounters()]
        switch result {
        case .delivered, .channelMoved: counter.delivered += 1
        case .channelExpired(let reason, let outcome):
            counter.expiredChannels += 1
            counter.errors[Self.code(reason, otherwise: outcome), default: 0] += 1
        case .failed(let outcome, let reason):
            counter.failed += 1
            counter.errors[Self.code(reason, otherwise: outcome), default: 0] += 1
        case .retry, .renewCredentials: break
        }
        counters[entry.service] = counter
        return [.report(entry.message, result)]
    }

    private mutating func schedule(_ id: String, at due: Date) {
        guard let entry = entries[id] else { return }
        // Never later than its expiry, when it is let go.
        retries.push(due: min(due, entry.message.expiresAt), id: id)
    }

    /// Seconds before the next attempt: 1, 2, 4 … up to a minute, with a tenth either way so that
    /// deliveries held back together do not all come back at once.
    static func backoff(attempts: Int) -> TimeInterval {
        let base = min(60, pow(2, Double(max(0, attempts - 1))))
        return base * Double.random(in: 0.9...1.1)
    }

    /// The service's error code from a reason such as "HTTP 410 Unregistered": the word after the
    /// status when it is a name, else the status. A reason that is no answer of a service (a
    /// request that could not be made, whose text may quote a send) counts under `otherwise`, the
    /// outcome's name, so that the codes counted are the services' and the hub's own words.
    static func code(_ reason: String, otherwise: String = "RequestError") -> String {
        if reason.hasPrefix("no answer") { return "NoAnswer" }
        let words = reason.split(separator: " ")
        guard words.count >= 2, words[0] == "HTTP" else { return otherwise }
        if words.count >= 3, words[2].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) { return String(words[2]) }
        return String(words[1])
    }
}
