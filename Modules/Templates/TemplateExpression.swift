import Foundation

/// The expression language of one template string value, as in Azure Notification Hubs:
///
/// | form | value |
/// | --- | --- |
/// | `$(prop)` | the property, or "" when missing |
/// | `$(prop, n)` | the property clipped to n characters |
/// | `.(prop, n)` | the property clipped to n characters, with "…" when clipped |
/// | `%(prop)` | the property URI-encoded |
/// | `#(prop)` | the property as a JSON number; only as the whole value |
/// | `{'a' + $(p) + "b"}` | literals and properties joined; only as the whole value |
///
/// Text around `$()`, `.()` and `%()` is kept, so "Hi $(name)!" works too.
/// Property names are case-insensitive.
public enum TemplateExpression: Equatable, Sendable {
    case text([Part])
    case number(String)

    public enum Part: Equatable, Sendable {
        case literal(String)
        case property(String)
        case clipped(String, Int, ellipsis: Bool)
        case uriEncoded(String)
    }

    public static func compile(_ source: String) throws(TemplateError) -> TemplateExpression {
        let trimmed = source.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("{"), trimmed.hasSuffix("}"), trimmed.count >= 2 {
            return .text(try compileConcatenation(String(trimmed.dropFirst().dropLast()), whole: source))
        }
        if trimmed.hasPrefix("#(") {
            let scanner = try scanFunction(Array(trimmed.utf8), at: 0, source: source)
            guard scanner.end == trimmed.utf8.count else {
                throw TemplateError("'\(source)': #(prop) must be the whole value, since it stands for a JSON number")
            }
            guard case .number(let name) = scanner.function else { fatalError("scanFunction returns # as number") }
            return .number(name)
        }
        return .text(try compileInterpolation(source))
    }

    /// Whether the value is plain text with no expression in it.
    public var isLiteral: Bool {
        if case .text(let parts) = self { return parts.allSatisfy { if case .literal = $0 { true } else { false } } }
        return false
    }

    /// The property names the expression reads, lowercased.
    public var properties: [String] {
        switch self {
        case .number(let name): return [name]
        case .text(let parts):
            return parts.compactMap {
                switch $0 {
                case .literal: return nil
                case .property(let name), .clipped(let name, _, _), .uriEncoded(let name): return name
                }
            }
        }
    }

    /// Renders as text. `properties` must have lowercased keys; `escape` is applied to what the
    /// properties put in, never to the template's own text (for XML, say).
    public func renderText(_ properties: [String: String], escape: (String) -> String = { $0 }) -> String {
        switch self {
        case .number(let name): return escape(properties[name] ?? "")
        case .text(let parts):
            var result = ""
            for part in parts {
                switch part {
                case .literal(let text): result += text
                case .property(let name): result += escape(properties[name] ?? "")
                case .clipped(let name, let limit, let ellipsis):
                    let value = properties[name] ?? ""
                    if value.count > limit {
                        result += escape(String(value.prefix(limit)) + (ellipsis ? "…" : ""))
                    } else {
                        result += escape(value)
                    }
                case .uriEncoded(let name):
                    result += (properties[name] ?? "").addingPercentEncoding(withAllowedCharacters: TemplateExpression.uriUnreserved) ?? ""
                }
            }
            return result
        }
    }

    static let uriUnreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    // MARK: Parsing

    enum Function: Equatable {
        case part(Part)
        case number(String)
    }

    /// Scans `X(name)` or `X(name, n)` starting at `start`, where X is one of $ . % #.
    static func scanFunction(_ bytes: [UInt8], at start: Int, source: String) throws(TemplateError) -> (function: Function, end: Int) {
        let kind = bytes[start]
        var index = start + 2
        guard let close = bytes[index...].firstIndex(of: UInt8(ascii: ")")) else {
            throw TemplateError("'\(source)': the '\(Character(UnicodeScalar(kind)))(' at \(start) is never closed with ')'")
        }
        let inside = String(decoding: bytes[index..<close], as: UTF8.self)
        index = close + 1
        let pieces = inside.split(separator: ",", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        let name = pieces[0].lowercased()
        guard !name.isEmpty else { throw TemplateError("'\(source)': the expression at \(start) names no property") }
        guard !name.contains(where: { "(){}'\"+$%#".contains($0) }) else {
            throw TemplateError("'\(source)': '\(pieces[0])' at \(start) is not a property name")
        }
        var limit: Int?
        if pieces.count == 2 {
            guard let n = Int(pieces[1]), n > 0 else {
                throw TemplateError("'\(source)': the length in the expression at \(start) must be a positive integer, not '\(pieces[1])'")
            }
            limit = n
        } else if pieces.count > 2 {
            throw TemplateError("'\(source)': the expression at \(start) takes a property and at most one length")
        }
        switch kind {
        case UInt8(ascii: "$"):
            return (.part(limit.map { .clipped(name, $0, ellipsis: false) } ?? .property(name)), index)
        case UInt8(ascii: "."):
            guard let limit else { throw TemplateError("'\(source)': .(prop, n) at \(start) needs a length n") }
            return (.part(.clipped(name, limit, ellipsis: true)), index)
        case UInt8(ascii: "%"):
            guard limit == nil else { throw TemplateError("'\(source)': %(prop) at \(start) takes no length") }
            return (.part(.uriEncoded(name)), index)
        default:
            guard limit == nil else { throw TemplateError("'\(source)': #(prop) at \(start) takes no length") }
            return (.number(name), index)
        }
    }

    static func compileInterpolation(_ source: String) throws(TemplateError) -> [Part] {
        let bytes = Array(source.utf8)
        var parts: [Part] = []
        var literal: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            let opens = index + 1 < bytes.count && bytes[index + 1] == UInt8(ascii: "(")
            if opens && (byte == UInt8(ascii: "$") || byte == UInt8(ascii: "%") || byte == UInt8(ascii: "#")
                || (byte == UInt8(ascii: ".") && looksLikeClip(bytes, at: index)))
            {
                if byte == UInt8(ascii: "#") {
                    throw TemplateError("'\(source)': #(prop) must be the whole value, since it stands for a JSON number")
                }
                if !literal.isEmpty {
                    parts.append(.literal(String(decoding: literal, as: UTF8.self)))
                    literal.removeAll()
                }
                let (function, end) = try scanFunction(bytes, at: index, source: source)
                if case .part(let part) = function { parts.append(part) }
                index = end
            } else {
                literal.append(byte)
                index += 1
            }
        }
        if !literal.isEmpty { parts.append(.literal(String(decoding: literal, as: UTF8.self))) }
        return parts
    }

    /// `.(` starts an expression only in the form `.(name, n)`, so prose such as "end.(see)" stays text.
    static func looksLikeClip(_ bytes: [UInt8], at index: Int) -> Bool {
        guard let close = bytes[(index + 2)...].firstIndex(of: UInt8(ascii: ")")) else { return false }
        let inside = String(decoding: bytes[(index + 2)..<close], as: UTF8.self)
        let pieces = inside.split(separator: ",")
        return pieces.count == 2 && Int(pieces[1].trimmingCharacters(in: .whitespaces)) != nil
    }

    static func compileConcatenation(_ body: String, whole source: String) throws(TemplateError) -> [Part] {
        let bytes = Array(body.utf8)
        var parts: [Part] = []
        var index = 0
        var expectOperand = true
        func skipSpaces() { while index < bytes.count, bytes[index] == UInt8(ascii: " ") { index += 1 } }
        while true {
            skipSpaces()
            if index >= bytes.count { break }
            let byte = bytes[index]
            if expectOperand {
                if byte == UInt8(ascii: "'") || byte == UInt8(ascii: "\"") {
                    guard let close = bytes[(index + 1)...].firstIndex(of: byte) else {
                        throw TemplateError("'\(source)': the quoted text at \(index + 1) is never closed")
                    }
                    parts.append(.literal(String(decoding: bytes[(index + 1)..<close], as: UTF8.self)))
                    index = close + 1
                } else if index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "("),
                    "$.%#".utf8.contains(byte)
                {
                    let (function, end) = try scanFunction(bytes, at: index, source: source)
                    switch function {
                    case .part(let part): parts.append(part)
                    case .number(let name): parts.append(.property(name))
                    }
                    index = end
                } else {
                    throw TemplateError(
                        "'\(source)': expected a quoted text or a $(prop) at \(index + 1) inside { }, found '\(Character(UnicodeScalar(byte)))'")
                }
                expectOperand = false
            } else {
                guard byte == UInt8(ascii: "+") else {
                    throw TemplateError("'\(source)': join the parts inside { } with +; found '\(Character(UnicodeScalar(byte)))' at \(index + 1)")
                }
                index += 1
                expectOperand = true
            }
        }
        guard !parts.isEmpty else { throw TemplateError("'\(source)': the { } expression is empty") }
        guard !expectOperand else { throw TemplateError("'\(source)': the { } expression ends with +") }
        return parts
    }
}
