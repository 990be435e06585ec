import Foundation
import Registrations
import HubProtocol

/// The `$filter` of `GET /{hub}/registrations`, as the SDKs write it: a field compared with `eq`
/// to a quoted string (`DeviceToken eq 'x'`, `ChannelUri eq 'x'`, `RegistrationId eq 'x'`), or the
/// fields of one handle joined with `and`, as the JS SDK looks up a browser (`Endpoint`, `P256DH`,
/// `Auth`) or a Baidu device (`BaiduChannelId`, `BaiduUserId`). Anything else is refused: a filter
/// that was ignored would return every registration, and a backend that deletes what comes back
/// would delete everyone.
enum RegistrationFilter: Equatable {
    case pushChannel(String)
    case registrationId(String)

    /// The fields that name a device's handle, one per platform; every one is the push channel here.
    static let channelFields = [
        "devicetoken", "channeluri", "gcmregistrationid", "fcmv1registrationid", "admregistrationid", "endpoint", "devicehandle",
        "pushchannel",
    ]

    static func parse(_ text: String) throws -> RegistrationFilter {
        let refusal = HubError(
            .invalidArgument,
            "$filter '\(text)' is not one this hub understands; use FIELD eq 'VALUE' with DeviceToken, ChannelUri, GcmRegistrationId, FcmV1RegistrationId, AdmRegistrationId or RegistrationId (a browser's Endpoint, P256DH and Auth, or BaiduChannelId and BaiduUserId, joined with and), or GET /{hub}/tags/{tag}/registrations for a tag")
        var terms: [String: String] = [:]
        // The JS SDK leaves out the opening quote of a Baidu channel id (`BaiduChannelId eq 9' and …`).
        let repaired = text.replacingOccurrences(
            of: #"(?i)(baiduchannelid\s+eq\s+)([^'\s][^']*)'"#, with: "$1'$2'", options: .regularExpression)
        for clause in try clauses(repaired, refusal) {
            let (field, value) = try comparison(clause, refusal)
            guard terms.updateValue(value, forKey: field) == nil else { throw refusal }
        }
        switch Set(terms.keys) {
        case ["registrationid"]:
            return .registrationId(terms["registrationid"]!)
        case ["endpoint", "p256dh", "auth"]:
            return .pushChannel(try InstallationJSON.browserChannel(
                endpoint: urlDecoded(terms["endpoint"]!), p256dh: terms["p256dh"]!, auth: terms["auth"]!))
        case ["baiduchannelid", "baiduuserid"]:
            return .pushChannel("\(terms["baiduuserid"]!)-\(terms["baiduchannelid"]!)")
        case let fields where fields.count == 1 && channelFields.contains(fields.first!):
            let field = fields.first!
            return .pushChannel(field == "channeluri" || field == "endpoint" ? urlDecoded(terms[field]!) : terms[field]!)
        default:
            throw refusal
        }
    }

    /// The clauses joined by ` and ` outside quotes.
    static func clauses(_ text: String, _ refusal: HubError) throws -> [String] {
        var clauses: [String] = []
        var current = ""
        var quoted = false
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            if character == "'" { quoted.toggle() }
            if !quoted, character == " ", text[index...].prefix(5).lowercased() == " and " {
                clauses.append(current)
                current = ""
                index = text.index(index, offsetBy: 5)
                continue
            }
            current.append(character)
            index = text.index(after: index)
        }
        clauses.append(current)
        return clauses.map { $0.trimmingCharacters(in: .whitespaces) }
    }

    /// `Field eq 'value'` (a quote inside written twice); lowercased field, unquoted value.
    static func comparison(_ clause: String, _ refusal: HubError) throws -> (String, String) {
        guard let space = clause.firstIndex(of: " ") else { throw refusal }
        let field = clause[..<space].lowercased()
        var rest = clause[space...].drop { $0 == " " }
        guard rest.lowercased().hasPrefix("eq ") else { throw refusal }
        rest = rest.dropFirst(3).drop { $0 == " " }
        guard rest.first == "'", rest.count >= 2, rest.last == "'" else { throw refusal }
        let inner = rest.dropFirst().dropLast()
        var value = ""
        var index = inner.startIndex
        while index < inner.endIndex {
            let character = inner[index]
            if character == "'" {
                let next = inner.index(after: index)
                guard next < inner.endIndex, inner[next] == "'" else { throw refusal }
                index = inner.index(after: next)
            } else {
                index = inner.index(after: index)
            }
            value.append(character)
        }
        guard !value.isEmpty else { throw refusal }
        return (field, value)
    }

    /// The JS SDK URL-encodes channel URIs and endpoints inside the filter; others send them as they are.
    static func urlDecoded(_ value: String) -> String {
        let lowered = value.lowercased()
        guard lowered.hasPrefix("http%3a") || lowered.hasPrefix("https%3a") else { return value }
        return value.removingPercentEncoding ?? value
    }
}
