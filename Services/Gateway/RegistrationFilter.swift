import HubProtocol

/// The `$filter` of `GET /{hub}/registrations`, as the SDKs write it: one field compared with `eq`
/// to a quoted string (`DeviceToken eq 'x'`, `ChannelUri eq 'x'`, `RegistrationId eq 'x'`). Anything
/// else is refused: a filter that was ignored would return every registration, and a backend that
/// deletes what comes back would delete everyone.
enum RegistrationFilter: Equatable {
    case pushChannel(String)
    case registrationId(String)

    /// The fields that name a device's handle, one per platform; every one is the push channel here.
    static let channelFields = [
        "devicetoken", "channeluri", "gcmregistrationid", "fcmv1registrationid", "admregistrationid", "baiduchannelid",
        "endpoint", "devicehandle", "pushchannel",
    ]

    static func parse(_ text: String) throws -> RegistrationFilter {
        let refusal = HubError(
            .invalidArgument,
            "$filter '\(text)' is not one this hub understands; use FIELD eq 'VALUE' with DeviceToken, ChannelUri, GcmRegistrationId, FcmV1RegistrationId, AdmRegistrationId, BaiduChannelId or RegistrationId, or GET /{hub}/tags/{tag}/registrations for a tag")
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let space = trimmed.firstIndex(of: " ") else { throw refusal }
        let field = trimmed[..<space].lowercased()
        var rest = trimmed[space...].drop { $0 == " " }
        guard rest.lowercased().hasPrefix("eq ") else { throw refusal }
        rest = rest.dropFirst(3).drop { $0 == " " }
        // An OData string: quoted with ', a quote inside written twice.
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
        if field == "registrationid" { return .registrationId(value) }
        if channelFields.contains(field) { return .pushChannel(value) }
        throw refusal
    }
}
