import Auth
import Foundation
import HubProtocol
import Tags

/// What makes a posted user notification acceptable. Plain logic.
enum UserNotificationRules {
    static let maxLifetime: TimeInterval = 30 * 86_400
    static let priorities = ["low", "normal", "high"]

    /// Checks a post and returns its expiry.
    static func validate(_ post: PostUserNotification, defaultLifetime: Int, now: Date) throws(HubError) -> Date {
        try identifier(post.userId, "userId")
        guard !post.appNotificationId.isEmpty, post.appNotificationId.utf8.count <= 200 else {
            throw HubError(.invalidArgument, "appNotificationId must be 1 to 200 characters")
        }
        if let encrypted = post.encrypted {
            guard post.visual == nil, post.raw == nil else {
                throw HubError(
                    .invalidPayload, "an encrypted notification carries its visual and raw content inside the record; leave visual and raw out")
            }
            try EncryptedRecord.check(encrypted)
        } else if post.visual == nil && post.raw == nil {
            throw HubError(.invalidPayload, "a user notification needs visual content (title and body), raw content, or both, or encrypted content")
        }
        if let visual = post.visual, visual.title.isEmpty && visual.body.isEmpty {
            throw HubError(.invalidPayload, "visual content needs a title or a body")
        }
        let size = (post.raw?.utf8.count ?? 0) + (post.visual.map { $0.title.utf8.count + $0.body.utf8.count } ?? 0)
        guard size <= 64 * 1024 else {
            throw HubError(.payloadTooLarge, "the content is \(size) bytes; the limit is 65536")
        }
        if let priority = post.priority, !priorities.contains(priority) {
            throw HubError(.invalidArgument, "priority '\(priority)' must be one of \(priorities.joined(separator: ", "))")
        }
        if let group = post.group, group.isEmpty || group.count > 100 {
            throw HubError(.invalidArgument, "group must be 1 to 100 characters")
        }
        let expiresAt = post.expiresAt ?? now.addingTimeInterval(TimeInterval(defaultLifetime))
        guard expiresAt > now else {
            throw HubError(.invalidArgument, "expiresAt \(WireDate.format(expiresAt)) is in the past")
        }
        guard expiresAt <= now.addingTimeInterval(maxLifetime + 1) else {
            throw HubError(.invalidArgument, "expiresAt \(WireDate.format(expiresAt)) is more than 30 days ahead")
        }
        return expiresAt
    }

    static func identifier(_ value: String, _ name: String) throws(HubError) {
        guard !value.isEmpty, value.utf8.count <= 120, value.utf8.allSatisfy({ Tag.isTagCharacter($0) }) else {
            throw HubError(.invalidArgument, "\(name) '\(value)' must be 1 to 120 characters of A–Z a–z 0–9 _ @ # . : -")
        }
    }
}
