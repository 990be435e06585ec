import Synchronization

/// A parsed tag expression: tags joined by `&&`, `||` and `!`, with parentheses.
/// `!` binds tightest, then `&&`, then `||`. An expression that uses only `||` may name up to
/// 20 tags; any other, up to 6.
public indirect enum TagExpression: Equatable, Sendable, CustomStringConvertible {
    case tag(String)
    case not(TagExpression)
    case and(TagExpression, TagExpression)
    case or(TagExpression, TagExpression)

    public static let maxTagsOrOnly = 20
    public static let maxTags = 6
    /// How deep `(` and `!` may nest; deeper input is refused before it can exhaust the stack.
    public static let maxDepth = 32

    public static func parse(_ text: String) throws(TagError) -> TagExpression {
        var parser = TagExpressionParser(text)
        let expression = try parser.parseExpression()
        try parser.expectEnd()
        let count = expression.tagCount
        let limit = expression.isOrOnly ? maxTagsOrOnly : maxTags
        guard count <= limit else {
            throw TagError(
                expression.isOrOnly
                    ? "the expression names \(count) tags; an expression of only || may name at most \(maxTagsOrOnly)"
                    : "the expression names \(count) tags; an expression with && or ! may name at most \(maxTags)")
        }
        return expression
    }

    /// `parse`, remembered: the same expression comes with send after send (a broadcast's tag, a
    /// backend's segment), and both the publish service's check and the dispatcher's plan read
    /// it. Only expressions that parse are kept, in ASCII, at most `rememberedLimit` of them (all are
    /// let go when that many are held) and none longer than `rememberedLength` bytes.
    public static func parsed(_ text: String) throws(TagError) -> TagExpression {
        // Only ASCII can parse, and only ASCII is kept: Swift's strings compare by canonical
        // equivalence, so a key such as "\u{212A}iosk" (Kelvin sign) would find "Kiosk".
        guard text.utf8.count <= rememberedLength, text.utf8.allSatisfy({ $0 < 0x80 }) else { return try parse(text) }
        if let known = remembered.withLock({ $0[text] }) { return known }
        let expression = try parse(text)
        remembered.withLock { known in
            if known.count >= rememberedLimit { known.removeAll(keepingCapacity: true) }
            known[text] = expression
        }
        return expression
    }

    public static let rememberedLimit = 1_024
    public static let rememberedLength = 1_024
    private static let remembered = Mutex<[String: TagExpression]>([:])

    public func matches(_ tags: Set<String>) -> Bool { matches(where: tags.contains) }

    /// Whether the tags that `has` answers for match, without a set of them being built.
    public func matches(where has: (String) -> Bool) -> Bool {
        switch self {
        case .tag(let tag): return has(tag)
        case .not(let inner): return !inner.matches(where: has)
        case .and(let left, let right): return left.matches(where: has) && right.matches(where: has)
        case .or(let left, let right): return left.matches(where: has) || right.matches(where: has)
        }
    }

    /// Every tag named, in order of appearance.
    public var tags: [String] {
        switch self {
        case .tag(let tag): return [tag]
        case .not(let inner): return inner.tags
        case .and(let left, let right), .or(let left, let right): return left.tags + right.tags
        }
    }

    public var tagCount: Int { tags.count }

    public var isOrOnly: Bool {
        switch self {
        case .tag: return true
        case .not, .and: return false
        case .or(let left, let right): return left.isOrOnly && right.isOrOnly
        }
    }

    /// Whether an installation with none of the named tags can match, as `!Sports` does.
    /// When false, only installations holding at least one named tag need to be looked at.
    public var matchesWithoutTags: Bool { matches([]) }

    public var description: String {
        switch self {
        case .tag(let tag): return tag
        case .not(let inner): return "!\(inner.parenthesized)"
        case .and(let left, let right): return "\(left.parenthesized) && \(right.parenthesized)"
        case .or(let left, let right): return "\(left.parenthesized) || \(right.parenthesized)"
        }
    }

    private var parenthesized: String {
        if case .tag = self { return description }
        if case .not = self { return description }
        return "(\(description))"
    }
}

/// Recursive descent over the expression's bytes, reporting errors by character offset. The
/// recursion is bounded: at most `maxDepth` levels of `(` and `!`, and at most `maxTagsOrOnly`
/// tags, counted as they are read, so a hostile expression is refused in one short pass.
struct TagExpressionParser {
    let bytes: [UInt8]
    var index = 0
    var depth = 0
    var tagsRead = 0

    init(_ text: String) { bytes = Array(text.utf8) }

    mutating func skipSpaces() {
        while index < bytes.count, bytes[index] == UInt8(ascii: " ") || bytes[index] == UInt8(ascii: "\t") {
            index += 1
        }
    }

    mutating func take(_ token: String) -> Bool {
        skipSpaces()
        let token = Array(token.utf8)
        guard index + token.count <= bytes.count, Array(bytes[index..<index + token.count]) == token else { return false }
        index += token.count
        return true
    }

    mutating func parseExpression() throws(TagError) -> TagExpression {
        var left = try parseAnd()
        while take("||") { left = .or(left, try parseAnd()) }
        return left
    }

    mutating func parseAnd() throws(TagError) -> TagExpression {
        var left = try parseUnary()
        while take("&&") { left = .and(left, try parseUnary()) }
        return left
    }

    mutating func parseUnary() throws(TagError) -> TagExpression {
        skipSpaces()
        if index < bytes.count, bytes[index] == UInt8(ascii: "!") || bytes[index] == UInt8(ascii: "(") {
            depth += 1
            guard depth <= TagExpression.maxDepth else {
                throw TagError("the expression nests '(' and '!' more than \(TagExpression.maxDepth) deep at \(index)", position: index)
            }
        }
        if take("!") {
            let inner = try parseUnary()
            depth -= 1
            return .not(inner)
        }
        if take("(") {
            let open = index - 1
            let inner = try parseExpression()
            guard take(")") else { throw TagError("the '(' at \(open) is never closed", position: open) }
            depth -= 1
            return inner
        }
        return try parseTag()
    }

    mutating func parseTag() throws(TagError) -> TagExpression {
        skipSpaces()
        let start = index
        if bytes[index...].starts(with: Array("$".utf8)) { index += 1 }
        while index < bytes.count, Tag.isTagCharacter(bytes[index]) { index += 1 }
        guard index > start else {
            if index >= bytes.count {
                throw TagError("the expression ends where a tag was expected", position: index)
            }
            let found = String(decoding: [bytes[index]], as: UTF8.self)
            throw TagError(
                "expected a tag at \(index) but found '\(found)'; tags use only A–Z a–z 0–9 _ @ # . : -", position: index)
        }
        tagsRead += 1
        guard tagsRead <= TagExpression.maxTagsOrOnly else {
            throw TagError("the expression names more than \(TagExpression.maxTagsOrOnly) tags; that is the most any expression may name", position: start)
        }
        let tag = String(decoding: bytes[start..<index], as: UTF8.self)
        if tag.hasPrefix("$") {
            guard tag.hasPrefix(Tag.installationPrefix) || tag.hasPrefix(Tag.userPrefix),
                tag.count > (tag.hasPrefix(Tag.userPrefix) ? Tag.userPrefix.count : Tag.installationPrefix.count)
            else {
                throw TagError("'\(tag)' at \(start) is not a tag; the special tags are $InstallationId:{id} and $UserId:{user}", position: start)
            }
        } else if tag.utf8.count > Tag.maxLength {
            throw TagError("the tag at \(start) is longer than \(Tag.maxLength) characters", position: start)
        }
        return .tag(tag)
    }

    mutating func expectEnd() throws(TagError) {
        skipSpaces()
        guard index == bytes.count else {
            let rest = String(decoding: bytes[index...].prefix(10), as: UTF8.self)
            if rest.hasPrefix(")") { throw TagError("the ')' at \(index) has no matching '('", position: index) }
            if rest.hasPrefix("&") || rest.hasPrefix("|") {
                throw TagError("'\(rest.prefix(2))' at \(index) is not an operator; use && or ||", position: index)
            }
            throw TagError("unexpected '\(rest)' at \(index); join tags with &&, || or !", position: index)
        }
    }
}
