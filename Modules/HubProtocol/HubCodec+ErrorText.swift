import Foundation

/// What a decoding error says to the sender: the field, and what it should have been.
extension HubCodec {
    /// Like `describe(_:)`, and when the decoder names no field (as for a number that does not
    /// fit its field: -1 for a count, 2^63 for an Int, 1.5 for a whole number), finds the field by
    /// putting 0 in place of each number in turn until the input decodes.
    static func describe<T: Decodable>(_ error: DecodingError, decoding type: T.Type, tree: Any) -> String {
        guard case .dataCorrupted(let context) = error, context.codingPath.isEmpty else { return describe(error) }
        var numbers: [([String], NSNumber)] = []
        collectNumbers(tree, path: [], into: &numbers)
        for (path, number) in numbers.prefix(64) {
            // A tree that will not serialize is skipped: this only finds which number to name.
            guard let replaced = replacing(path[...], in: tree, with: 0),
                let data = try? JSONSerialization.data(withJSONObject: replaced)
            else { continue }
            do {
                _ = try decoder.decode(T.self, from: data)
            } catch let other as DecodingError {
                if case .dataCorrupted(let again) = other, again.codingPath.isEmpty { continue }
            } catch {
                continue
            }
            let name = path.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
            let value = number.stringValue
            let reason = value.contains(".") || value.contains("e") || value.contains("E")
                ? "must be a whole number"
                : value.hasPrefix("-") ? "must not be negative" : "is too large for this field"
            return "'\(name)' is \(value) but \(reason)"
        }
        return describe(error)
    }

    private static func collectNumbers(_ value: Any, path: [String], into numbers: inout [([String], NSNumber)]) {
        switch value {
        case let object as [String: Any]:
            for key in object.keys.sorted() { collectNumbers(object[key]!, path: path + [key], into: &numbers) }
        case let array as [Any]:
            for (index, element) in array.enumerated() { collectNumbers(element, path: path + ["[\(index)]"], into: &numbers) }
        case let number as NSNumber where !isBoolean(number):
            numbers.append((path, number))
        default:
            break
        }
    }

    private static func replacing(_ path: ArraySlice<String>, in value: Any, with replacement: Any) -> Any? {
        guard let first = path.first else { return replacement }
        if var object = value as? [String: Any], let child = object[first] {
            object[first] = replacing(path.dropFirst(), in: child, with: replacement)
            return object
        }
        if var array = value as? [Any], first.hasPrefix("["), let index = Int(first.dropFirst().dropLast()), array.indices.contains(index) {
            array[index] = replacing(path.dropFirst(), in: array[index], with: replacement) as Any
            return array
        }
        return nil
    }

    public static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
            let joined = keys.joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
            return joined.isEmpty ? "the payload" : "'\(joined)'"
        }
        switch error {
        case .keyNotFound(let key, let context):
            let parent = path(context)
            return "missing field '\(key.stringValue)'" + (context.codingPath.count > 1 ? " in \(parent)" : "")
        case .typeMismatch(let type, let context):
            return "\(path(context)) must be \(describe(type))"
        case .valueNotFound(let type, let context):
            return "\(path(context)) must be \(describe(type)), not null"
        case .dataCorrupted(let context):
            return "\(path(context)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Int.Type, is Int64.Type, is UInt64.Type, is Int32.Type: return "an integer"
        case is Double.Type: return "a number"
        case is Bool.Type: return "true or false"
        case is [Any].Type: return "an array"
        default:
            let name = "\(type)"
            return name.hasPrefix("Dictionary") || name.hasPrefix("KeyedDecoding") ? "an object" : "a \(name)"
        }
    }
}
