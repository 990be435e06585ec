import Tags
import Testing

@Suite("Tags")
struct TagTests {
    @Test("valid tags", arguments: ["World", "a", "user@example.com", "team#1", "v1.2:beta-x_y", String(repeating: "x", count: 120)])
    func valid(tag: String) throws {
        try Tag.validate(tag)
    }

    @Test("invalid tags are refused with the reason", arguments: [
        ("", "empty"), ("two words", "' '"), ("ünïcode", "non-ASCII"), (String(repeating: "x", count: 121), "limit is 120"),
        ("a,b", "','"), ("$InstallationId:x", "'$'"),
    ])
    func invalid(tag: String, reason: String) {
        do {
            try Tag.validate(tag)
            Issue.record("'\(tag)' should be refused")
        } catch {
            #expect(error.message.contains(reason), "\(error.message)")
        }
    }

    @Test("at most 60 tags on an installation")
    func limit() throws {
        try Tag.validate(all: (1...60).map { "t\($0)" })
        #expect(throws: TagError.self) { try Tag.validate(all: (1...61).map { "t\($0)" }) }
    }

    @Test("effective tags add the installation and user tags")
    func effective() {
        #expect(Tag.effectiveTags(stored: ["World"], installationId: "i1", userId: "alice")
            == ["World", "$InstallationId:i1", "$UserId:alice"])
        #expect(Tag.effectiveTags(stored: [], installationId: "i1", userId: nil) == ["$InstallationId:i1"])
    }

    @Test("a tag is effective exactly when effectiveTags holds it, however it is asked")
    func isEffective() {
        let asked = ["World", "world", "Sports", "$InstallationId:i1", "$InstallationId:i", "$InstallationId:i12", "$InstallationId:",
                     "$UserId:alice", "$UserId:alic", "$UserId:", "$UserId:bob", "InstallationId:i1", ""]
        for (stored, user) in [(["World"], "alice"), ([], nil), (["Sports", "World"], ""), (["World"], "bob")] as [([String], String?)] {
            let effective = Tag.effectiveTags(stored: stored, installationId: "i1", userId: user)
            for tag in asked {
                #expect(Tag.isEffective(tag, stored: stored, installationId: "i1", userId: user) == effective.contains(tag), "\(tag) for \(stored), \(user ?? "nil")")
            }
            let expression = try? TagExpression.parse("World && !$UserId:bob")
            #expect(expression?.matches(where: { Tag.isEffective($0, stored: stored, installationId: "i1", userId: user) }) == expression?.matches(effective))
        }
    }
}

@Suite("Tag expressions")
struct TagExpressionTests {
    @Test("a remembered parse answers as a fresh one, refusals included, past the limit of what it keeps")
    func rememberedParse() throws {
        var texts = ["a || b && !c", "(a || b) && c", "World", "a &&", "", "((a)", "!!!x", String(repeating: "x", count: TagExpression.rememberedLength + 1)]
        texts += (0..<(TagExpression.rememberedLimit + 10)).map { "tag\($0) || other\($0 % 7)" }
        for _ in 0..<2 {
            for text in texts {
                let fresh = Result { () throws(TagError) in try TagExpression.parse(text) }
                let remembered = Result { () throws(TagError) in try TagExpression.parsed(text) }
                switch (fresh, remembered) {
                case (.success(let a), .success(let b)): #expect(a == b, "\(text)")
                case (.failure(let a), .failure(let b)): #expect(a.message == b.message, "\(text)")
                default: Issue.record("'\(text)': \(fresh) against \(remembered)")
                }
            }
        }
        // Text that Swift holds equal to a remembered expression, but that is not the same bytes,
        // is parsed afresh: the Kelvin sign is not a tag character.
        _ = try TagExpression.parsed("Kiosk")
        #expect(throws: TagError.self) { try TagExpression.parsed("\u{212A}iosk") }
    }

    @Test("precedence: ! then && then ||")
    func precedence() throws {
        #expect(try TagExpression.parse("a || b && !c") == .or(.tag("a"), .and(.tag("b"), .not(.tag("c")))))
        #expect(try TagExpression.parse("(a || b) && c") == .and(.or(.tag("a"), .tag("b")), .tag("c")))
        #expect(try TagExpression.parse("!!a") == .not(.not(.tag("a"))))
        #expect(try TagExpression.parse("  World&&!Sports ") == .and(.tag("World"), .not(.tag("Sports"))))
    }

    @Test("evaluation against tag sets", arguments: [
        ("World && !Sports", ["World"], true),
        ("World && !Sports", ["World", "Sports"], false),
        ("(Politics || Science)", ["Science"], true),
        ("(Politics || Science)", ["World"], false),
        ("!Sports", [], true),
        ("$UserId:alice && World", ["$UserId:alice", "World"], true),
        ("$InstallationId:i-1", ["$InstallationId:i-2"], false),
    ])
    func evaluate(expression: String, tags: [String], expected: Bool) throws {
        #expect(try TagExpression.parse(expression).matches(Set(tags)) == expected)
    }

    @Test("20 tags with only ||, 6 otherwise")
    func limits() throws {
        let twenty = (1...20).map { "t\($0)" }.joined(separator: " || ")
        #expect(try TagExpression.parse(twenty).tagCount == 20)
        #expect(throws: TagError.self) { try TagExpression.parse(twenty + " || t21") }
        let six = (1...6).map { "t\($0)" }.joined(separator: " && ")
        #expect(try TagExpression.parse(six).tagCount == 6)
        #expect(throws: TagError.self) { try TagExpression.parse(six + " && t7") }
        #expect(throws: TagError.self) { try TagExpression.parse("!a || b || c || d || e || f || g") }
    }

    @Test("parse errors say where and why", arguments: [
        ("", 0, "ends where a tag was expected"),
        ("a &&", 4, "ends where a tag was expected"),
        ("(a || b", 0, "never closed"),
        ("a || b)", 6, "no matching '('"),
        ("a & b", 2, "use && or ||"),
        ("a b", 2, "join tags"),
        ("a && %", 5, "expected a tag at 5"),
        ("$Foo:x", 0, "special tags"),
    ])
    func errors(expression: String, position: Int, reason: String) {
        do {
            _ = try TagExpression.parse(expression)
            Issue.record("'\(expression)' should not parse")
        } catch {
            #expect(error.position == position, "\(error.message)")
            #expect(error.message.contains(reason), "\(error.message)")
        }
    }

    @Test("whether an expression can match an installation with none of its tags")
    func matchesWithoutTags() throws {
        #expect(try TagExpression.parse("!Sports").matchesWithoutTags)
        #expect(try !TagExpression.parse("World || Sports").matchesWithoutTags)
        #expect(try !TagExpression.parse("World && !Sports").matchesWithoutTags)
    }
}
