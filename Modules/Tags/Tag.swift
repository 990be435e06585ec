/// Tag rules, as in Azure Notification Hubs: 1 to 120 characters of `A–Z a–z 0–9 _ @ # . : -`,
/// at most 60 on an installation. Two special forms address one installation or one user.
public enum Tag {
    public static let maxLength = 120
    public static let maxPerInstallation = 60
    public static let installationPrefix = "$InstallationId:"
    public static let userPrefix = "$UserId:"

    public static func isTagCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "_"), UInt8(ascii: "@"), UInt8(ascii: "#"), UInt8(ascii: "."), UInt8(ascii: ":"),
            UInt8(ascii: "-"):
            return true
        default:
            return false
        }
    }

    /// Checks one tag an installation stores. Special tags are derived, never stored.
    public static func validate(_ tag: String) throws(TagError) {
        guard !tag.isEmpty else { throw TagError("a tag cannot be empty") }
        guard tag.utf8.count <= maxLength else {
            throw TagError("tag '\(tag.prefix(20))…' is \(tag.utf8.count) characters; the limit is \(maxLength)")
        }
        if let bad = tag.utf8.first(where: { !isTagCharacter($0) }) {
            let character = String(decoding: [bad], as: UTF8.self)
            throw TagError(
                "tag '\(tag)' has '\(bad < 0x80 ? character : "non-ASCII")'; tags use only A–Z a–z 0–9 _ @ # . : -")
        }
    }

    /// Checks an installation's tag list: each tag, no more than `limit` (60 unless configured).
    public static func validate(all tags: [String], limit: Int = maxPerInstallation) throws(TagError) {
        guard tags.count <= limit else {
            throw TagError("an installation has at most \(limit) tags (limits.tagsPerInstallation); this one has \(tags.count)")
        }
        for tag in tags { try validate(tag) }
    }

    /// The tags an installation is matched against: its own, plus its special ones.
    public static func effectiveTags(stored: [String], installationId: String, userId: String?) -> Set<String> {
        var tags = Set(stored)
        tags.insert(installationPrefix + installationId)
        if let userId, !userId.isEmpty { tags.insert(userPrefix + userId) }
        return tags
    }

    /// Whether `tag` is one of `effectiveTags(stored:installationId:userId:)`, without building them.
    public static func isEffective(_ tag: String, stored: [String], installationId: String, userId: String?) -> Bool {
        if stored.contains(tag) { return true }
        if tag.hasPrefix(installationPrefix) { return tag.utf8.dropFirst(installationPrefix.utf8.count).elementsEqual(installationId.utf8) }
        if let userId, !userId.isEmpty, tag.hasPrefix(userPrefix) { return tag.utf8.dropFirst(userPrefix.utf8.count).elementsEqual(userId.utf8) }
        return false
    }
}

/// A tag or tag expression that breaks the rules; the message says which rule, and where.
public struct TagError: Error, Equatable, Sendable, CustomStringConvertible {
    public let message: String
    /// Character offset in the expression, when the error is in one.
    public let position: Int?

    public init(_ message: String, position: Int? = nil) {
        self.message = message
        self.position = position
    }

    public var description: String { message }
}
