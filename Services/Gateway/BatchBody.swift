import Foundation
import HubProtocol

/// The body of `POST /{hub}/messages/$batch?direct`: `multipart/mixed` with a `notification` part
/// (the payload) and a `devices` part (a JSON array of device handles, at most 1,000). Read
/// leniently, as the SDKs write it differently: `boundary = "…"` with spaces, `Content-type`, LF or
/// CRLF line ends, no line end after the closing boundary, and single-quoted handles.
struct BatchBody {
    var notification: Data
    var devices: [String]

    static func parse(_ body: Data, contentType: String?) throws -> BatchBody {
        guard let contentType, contentType.lowercased().hasPrefix("multipart/") else {
            throw HubError(.invalidArgument, "a batch send is multipart/mixed with a notification part and a devices part")
        }
        guard let boundary = Self.boundary(contentType) else {
            throw HubError(.invalidArgument, "Content-Type needs boundary=…, the multipart boundary")
        }
        let text = String(decoding: body, as: UTF8.self)
        var parts: [String: String] = [:]
        for chunk in text.components(separatedBy: "--\(boundary)").dropFirst() {
            if chunk.hasPrefix("--") { break }
            var lines = chunk.replacingOccurrences(of: "\r\n", with: "\n").components(separatedBy: "\n")
            if lines.first?.trimmingCharacters(in: .whitespaces).isEmpty == true { lines.removeFirst() }
            guard let blank = lines.firstIndex(where: { $0.trimmingCharacters(in: .whitespaces).isEmpty }) else { continue }
            let headers = lines[..<blank].map { $0.lowercased() }
            guard let disposition = headers.first(where: { $0.hasPrefix("content-disposition:") }),
                let name = ["notification", "devices"].first(where: { disposition.contains("name=\($0)") || disposition.contains("name=\"\($0)\"") })
            else { continue }
            var content = lines[(blank + 1)...].joined(separator: "\n")
            if content.hasSuffix("\n") { content.removeLast() }
            parts[name] = content
        }
        guard let notification = parts["notification"] else {
            throw HubError(.invalidArgument, "the batch has no part named notification (Content-Disposition: inline; name=notification)")
        }
        guard let devicesText = parts["devices"] else {
            throw HubError(.invalidArgument, "the batch has no part named devices: a JSON array of device handles")
        }
        let devices = try Self.handles(devicesText)
        guard (1...1_000).contains(devices.count) else {
            throw HubError(.invalidArgument, "a batch goes to 1 to 1,000 devices, not \(devices.count)")
        }
        return BatchBody(notification: Data(notification.utf8), devices: devices)
    }

    static func boundary(_ contentType: String) -> String? {
        for parameter in contentType.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2, pair[0].lowercased() == "boundary" else { continue }
            let value = pair[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            return value.isEmpty ? nil : value
        }
        return nil
    }

    static func handles(_ text: String) throws -> [String] {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if let array = JSONValue.parse(trimmed)?.arrayValue {
            let strings = array.compactMap(\.stringValue)
            guard strings.count == array.count else { throw HubError(.invalidPayload, "devices must be an array of strings") }
            return strings
        }
        // The REST reference's own example quotes with ', which JSON does not allow.
        if trimmed.hasPrefix("["), trimmed.hasSuffix("]"), !trimmed.contains("\"") {
            return trimmed.dropFirst().dropLast().split(separator: ",").map {
                $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "'"))
            }.filter { !$0.isEmpty }
        }
        throw HubError(.invalidPayload, "devices must be a JSON array of device handles, such as [\"handle1\",\"handle2\"]")
    }
}
