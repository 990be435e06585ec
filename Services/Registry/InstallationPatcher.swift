import Foundation
import HubProtocol

/// Applies JSON Patch (RFC 6902) operations to an installation: add, remove and replace on
/// /tags, /tags/{tag}, /pushChannel, /userId, /templates/{name} and its members.
enum InstallationPatcher {
    static func apply(_ operations: [PatchOperation], to original: Installation) throws(HubError) -> Installation {
        guard !operations.isEmpty else { throw HubError(.invalidArgument, "the patch has no operations") }
        var installation = original
        for (index, operation) in operations.enumerated() {
            try apply(operation, index: index, to: &installation)
        }
        return installation
    }

    static func apply(_ operation: PatchOperation, index: Int, to installation: inout Installation) throws(HubError) {
        let where_ = "operation \(index) (\(operation.op) \(operation.path))"
        guard ["add", "remove", "replace"].contains(operation.op) else {
            throw HubError(.invalidArgument, "\(where_): op must be add, remove or replace")
        }
        let segments = operation.path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map {
            $0.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
        }
        guard operation.path.hasPrefix("/"), let head = segments.first else {
            throw HubError(.invalidArgument, "\(where_): a path starts with '/', such as /tags")
        }
        let value = operation.value
        func string() throws(HubError) -> String {
            guard let text = value?.stringValue else { throw HubError(.invalidArgument, "\(where_): the value must be a string") }
            return text
        }
        func strings() throws(HubError) -> [String] {
            switch value {
            case .string(let text)?: return [text]
            case .array(let items)?:
                var result: [String] = []
                for item in items {
                    guard let text = item.stringValue else {
                        throw HubError(.invalidArgument, "\(where_): the value must be a string or an array of strings")
                    }
                    result.append(text)
                }
                return result
            default: throw HubError(.invalidArgument, "\(where_): the value must be a string or an array of strings")
            }
        }
        switch (head, segments.count, operation.op) {
        case ("tags", 1, "add"):
            for tag in try strings() where !installation.tags.contains(tag) { installation.tags.append(tag) }
        case ("tags", 1, "replace"):
            installation.tags = try strings()
        case ("tags", 1, "remove"):
            installation.tags = []
        case ("tags", 2, "remove"):
            let tag = segments[1]
            guard let position = installation.tags.firstIndex(of: tag) else {
                throw HubError(.notFound, "\(where_): the installation has no tag '\(tag)'")
            }
            installation.tags.remove(at: position)
        case ("tags", 2, _):
            let tag = segments[1]
            if !installation.tags.contains(tag) { installation.tags.append(tag) }
        case ("pushChannel", 1, "add"), ("pushChannel", 1, "replace"):
            installation.pushChannel = try string()
        case ("pushChannelObject", 1, "add"), ("pushChannelObject", 1, "replace"):
            // The shape the REST API gives a browser subscription back in (the gateway adds it).
            guard case .bool(let object)? = value else { throw HubError(.invalidArgument, "\(where_): the value must be true or false") }
            installation.pushChannelObject = object ? true : nil
        case ("userId", 1, "add"), ("userId", 1, "replace"):
            installation.userId = try string()
        case ("userId", 1, "remove"):
            installation.userId = nil
        case ("templates", 2, "remove"):
            guard installation.templates?.removeValue(forKey: segments[1]) != nil else {
                throw HubError(.notFound, "\(where_): the installation has no template '\(segments[1])'")
            }
        case ("templates", 2, _):
            installation.templates = installation.templates ?? [:]
            installation.templates![segments[1]] = try template(from: value, where_)
        case ("templates", 3, _):
            let name = segments[1]
            guard var template = installation.templates?[name] else {
                throw HubError(.notFound, "\(where_): the installation has no template '\(name)'")
            }
            let remove = operation.op == "remove"
            switch segments[2] {
            case "body":
                guard !remove else { throw HubError(.invalidArgument, "\(where_): a template must keep its body") }
                template.body = try string()
            case "expiry": template.expiry = remove ? nil : try string()
            case "tags": template.tags = remove ? nil : try strings()
            case "headers":
                if remove {
                    template.headers = nil
                } else {
                    guard case .object(let members)? = value else {
                        throw HubError(.invalidArgument, "\(where_): headers must be an object of strings")
                    }
                    var headers: [String: String] = [:]
                    for (key, member) in members {
                        guard let text = member.stringValue else {
                            throw HubError(.invalidArgument, "\(where_): header '\(key)' must be a string")
                        }
                        headers[key] = text
                    }
                    template.headers = headers
                }
            default:
                throw HubError(.invalidArgument, "\(where_): a template has body, expiry, tags and headers")
            }
            installation.templates![name] = template
        default:
            throw HubError(
                .invalidArgument,
                "\(where_): cannot \(operation.op) this path; patchable paths are /tags, /tags/{tag}, /pushChannel, /userId, /templates/{name} and /templates/{name}/body|expiry|tags|headers")
        }
    }

    static func template(from value: JSONValue?, _ where_: String) throws(HubError) -> InstallationTemplate {
        // The SDKs send the template as a JSON string, as the REST reference documents; an object is taken too.
        if case .string(let text)? = value {
            // Refused just below, as a value that is not a template.
            guard let parsed = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)), case .object = parsed else {
                throw HubError(.invalidArgument, "\(where_): the value must be a template, as a JSON object or a string holding one, with a body")
            }
            return try template(from: parsed, where_)
        }
        guard case .object(let members)? = value else {
            throw HubError(.invalidArgument, "\(where_): the value must be a template, as a JSON object or a string holding one, with a body")
        }
        guard let body = members["body"]?.stringValue else {
            throw HubError(.invalidArgument, "\(where_): a template needs a 'body' string")
        }
        for key in members.keys where !["body", "expiry", "tags", "headers"].contains(key) {
            throw HubError(.unknownField, "\(where_): a template has no field '\(key)'")
        }
        var tags: [String]?
        if case .array(let items)? = members["tags"] { tags = items.compactMap(\.stringValue) }
        var headers: [String: String]?
        if case .object(let items)? = members["headers"] { headers = items.compactMapValues(\.stringValue) }
        return InstallationTemplate(body: body, expiry: members["expiry"]?.stringValue, tags: tags, headers: headers)
    }
}
