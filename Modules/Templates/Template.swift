import Foundation

/// A compiled template: a JSON body whose string values may hold template expressions, or an XML
/// (or plain text) body with expressions in its text, as Windows notifications use. Compiling
/// checks the body and every expression, so a bad template is refused when it is registered,
/// never when a notification is sent.
public struct Template: Sendable {
    public let source: String
    private let root: Node

    /// What a body is written in, which decides how it is checked and how properties are escaped.
    public enum Markup: String, Sendable {
        /// JSON; expressions are whole string values (APNs, FCM, ADM, Baidu, browsers, Linux agents).
        case json
        /// XML; expressions anywhere in text or attributes, their values escaped for XML (WNS toast, tile, badge).
        case xml
        /// Any text, filled in as it is (WNS raw).
        case text
    }

    indirect enum Node: Sendable {
        case object([(String, Node)])
        case array([Node])
        case expression(TemplateExpression)
        case literal(JSONLiteral)
        case markup(TemplateExpression, escaped: Bool)
    }

    /// The body's markup for an installation's platform and template headers.
    public static func markup(platform: String, headers: [String: String]?) -> Markup {
        guard platform.lowercased() == "wns" else { return .json }
        let type = headers?.first { $0.key.lowercased() == "x-wns-type" }?.value.lowercased()
        return type == "wns/raw" ? .text : .xml
    }

    private init(source: String, root: Node) {
        self.source = source
        self.root = root
    }

    public init(_ source: String, markup: Markup) throws(TemplateError) {
        switch markup {
        case .json:
            try self.init(source)
        case .xml, .text:
            let trimmed = source.drop { $0 == " " || $0 == "\n" || $0 == "\r" || $0 == "\t" }
            if markup == .xml && !trimmed.hasPrefix("<") {
                throw TemplateError("the template body must be XML, such as <toast>…</toast>, for a Windows notification")
            }
            guard !source.isEmpty else { throw TemplateError("the template body is empty") }
            self.init(source: source, root: .markup(.text(try TemplateExpression.compileInterpolation(source)), escaped: markup == .xml))
        }
    }

    enum JSONLiteral: Sendable {
        case null, bool(Bool), number(String)
    }

    public init(_ source: String) throws(TemplateError) {
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: Data(source.utf8), options: [.fragmentsAllowed])
        } catch {
            throw TemplateError("the template body is not valid JSON: \(Template.describe(error))")
        }
        self.source = source
        root = try Template.compile(parsed, path: "")
    }

    static func describe(_ error: Error) -> String {
        let text = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String
        return text ?? "\(error.localizedDescription)"
    }

    static func compile(_ value: Any, path: String) throws(TemplateError) -> Node {
        switch value {
        case let object as [String: Any]:
            var members: [(String, Node)] = []
            for key in object.keys.sorted() {
                members.append((key, try compile(object[key]!, path: path.isEmpty ? key : "\(path).\(key)")))
            }
            return .object(members)
        case let array as [Any]:
            var items: [Node] = []
            for (index, item) in array.enumerated() { items.append(try compile(item, path: "\(path)[\(index)]")) }
            return .array(items)
        case let text as String:
            do {
                return .expression(try TemplateExpression.compile(text))
            } catch {
                throw TemplateError(path.isEmpty ? error.message : "at \(path): \(error.message)")
            }
        case is NSNull:
            return .literal(.null)
        case let number as NSNumber:
            if String(cString: number.objCType) == "c" { return .literal(.bool(number.boolValue)) }
            return .literal(.number(number.stringValue))
        default:
            throw TemplateError("unsupported JSON value at \(path)")
        }
    }

    /// Fills in the template with a property map and returns the JSON text.
    public func render(_ properties: [String: String]) -> String {
        let lowered = Dictionary(properties.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        var output = ""
        Template.write(root, lowered, into: &output)
        return output
    }

    static func write(_ node: Node, _ properties: [String: String], into output: inout String) {
        switch node {
        case .object(let members):
            output += "{"
            for (index, (key, value)) in members.enumerated() {
                if index > 0 { output += "," }
                writeString(key, into: &output)
                output += ":"
                write(value, properties, into: &output)
            }
            output += "}"
        case .array(let items):
            output += "["
            for (index, item) in items.enumerated() {
                if index > 0 { output += "," }
                write(item, properties, into: &output)
            }
            output += "]"
        case .literal(.null): output += "null"
        case .literal(.bool(let value)): output += value ? "true" : "false"
        case .literal(.number(let text)): output += text
        case .expression(.number(let name)):
            output += jsonNumber(properties[name])
        case .expression(let expression):
            writeString(expression.renderText(properties), into: &output)
        case .markup(let expression, let escaped):
            output += escaped ? expression.renderText(properties, escape: xmlEscaped) : expression.renderText(properties)
        }
    }

    /// A property as a JSON number; one that is missing or not a number becomes null.
    static func jsonNumber(_ value: String?) -> String {
        guard let value = value?.trimmingCharacters(in: .whitespaces), let number = Double(value), number.isFinite else {
            return "null"
        }
        if number.rounded() == number, abs(number) < 1e15 { return String(Int64(number)) }
        return String(number)
    }

    static func writeString(_ text: String, into output: inout String) {
        output += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            default:
                if scalar.value < 0x20 {
                    output += String(format: "\\u%04x", scalar.value)
                } else {
                    output.unicodeScalars.append(scalar)
                }
            }
        }
        output += "\""
    }
}

/// Text made safe inside XML text and attribute values.
func xmlEscaped(_ text: String) -> String {
    var output = ""
    output.reserveCapacity(text.utf8.count)
    for character in text {
        switch character {
        case "&": output += "&amp;"
        case "<": output += "&lt;"
        case ">": output += "&gt;"
        case "\"": output += "&quot;"
        case "'": output += "&apos;"
        default: output.append(character)
        }
    }
    return output
}
