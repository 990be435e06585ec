import Foundation

/// A compiled template: a JSON body whose string values may hold template expressions.
/// Compiling checks the JSON and every expression, so a bad template is refused when it is
/// registered, never when a notification is sent.
public struct Template: Sendable {
    public let source: String
    private let root: Node

    indirect enum Node: Sendable {
        case object([(String, Node)])
        case array([Node])
        case expression(TemplateExpression)
        case literal(JSONLiteral)
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
