import Foundation
import HubProtocol
import Tags

/// What makes a send acceptable. Plain logic: a request in, its time to live or a `HubError` out.
enum SendRules {
    static let maxPayloadBytes = 64 * 1024
    static let maxTimeToLive = 30 * 86_400

    static let maxScheduleAhead: TimeInterval = 7 * 86_400

    static func validate(
        _ send: SendNotification, defaultTimeToLive: Int, maxExpressionBytes: Int = 4_096, now: Date = Date()
    ) throws(HubError) -> Int {
        let targets = [send.tagExpression, send.installationId, send.userId].compactMap { $0 } + (send.installationIds == nil ? [] : ["ids"])
        guard targets.count <= 1 else {
            throw HubError(.invalidArgument, "give at most one of tagExpression, installationId, installationIds and userId; none sends to everyone")
        }
        if let ids = send.installationIds {
            guard (1...1_000).contains(ids.count) else {
                throw HubError(.invalidArgument, "installationIds holds 1 to 1,000 installations, not \(ids.count)")
            }
            for id in ids where id.isEmpty || !id.utf8.allSatisfy({ Tag.isTagCharacter($0) }) {
                throw HubError(.invalidArgument, "installationIds: '\(id)' may use only A–Z a–z 0–9 _ @ # . : -")
            }
        }
        if let expression = send.tagExpression {
            guard expression.utf8.count <= maxExpressionBytes else {
                throw HubError(
                    .invalidExpression,
                    "the tag expression is \(expression.utf8.count) bytes; the limit is \(maxExpressionBytes) (limits.expressionBytes)")
            }
            do {
                _ = try TagExpression.parsed(expression)
            } catch {
                throw HubError(.invalidExpression, "tag expression '\(expression)': \(error.message)")
            }
        }
        for (name, value) in [("installationId", send.installationId), ("userId", send.userId)] {
            if let value, value.isEmpty || !value.utf8.allSatisfy({ Tag.isTagCharacter($0) }) {
                throw HubError(.invalidArgument, "\(name) '\(value)' may use only A–Z a–z 0–9 _ @ # . : -")
            }
        }
        if let scheduledAt = send.scheduledAt {
            guard scheduledAt > now else {
                throw HubError(.invalidArgument, "scheduledAt \(WireDate.format(scheduledAt)) is in the past; schedule a time ahead, at most 7 days")
            }
            guard scheduledAt <= now.addingTimeInterval(maxScheduleAhead) else {
                throw HubError(.invalidArgument, "scheduledAt \(WireDate.format(scheduledAt)) is more than 7 days ahead")
            }
        }
        switch send.format {
        case .native:
            guard let body = send.body else { throw HubError(.invalidPayload, "a native send needs 'body', the payload") }
            guard send.properties == nil else {
                throw HubError(.invalidPayload, "a native send takes 'body', not 'properties'; use format template for a property map")
            }
            guard body.utf8.count <= maxPayloadBytes else {
                throw HubError(.payloadTooLarge, "the body is \(body.utf8.count) bytes; the limit is \(maxPayloadBytes)")
            }
            let platform = send.platform ?? .linux
            if platform != .linux {
                guard send.rich == nil else { throw HubError(.invalidArgument, "a rich send goes to linux agents only") }
            }
            try platform.check(payload: body, headers: send.headers ?? [:])
            for name in (send.headers ?? [:]).keys where !platform.headerPrefixes.contains(where: { name.hasPrefix($0) }) {
                throw HubError(.invalidArgument, "header '\(name)' is not one a \(platform.format) notification takes")
            }
        case .template:
            guard let properties = send.properties else {
                throw HubError(.invalidPayload, "a template send needs 'properties', a map of strings such as {\"messageParam\": \"…\"}")
            }
            guard send.body == nil else {
                throw HubError(.invalidPayload, "a template send takes 'properties', not 'body'")
            }
            guard send.platform == nil, send.headers == nil else {
                throw HubError(.invalidArgument, "a template send goes to every platform's templates; platform and headers are for native sends")
            }
            let size = properties.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
            guard size <= maxPayloadBytes else {
                throw HubError(.payloadTooLarge, "the properties are \(size) bytes; the limit is \(maxPayloadBytes)")
            }
        }
        let timeToLive = send.timeToLive ?? defaultTimeToLive
        guard (1...maxTimeToLive).contains(timeToLive) else {
            throw HubError(.invalidArgument, "timeToLive must be 1 to \(maxTimeToLive) seconds (30 days), not \(timeToLive)")
        }
        return timeToLive
    }
}
