import Foundation

/// Fields a payload's type does not have: found by encoding the decoded value again and
/// comparing the two trees.
extension HubCodec {
    /// The first field path present in the input payload but absent from the decoded value,
    /// found by encoding the value again and comparing the two trees.
    static func unknownField<M: HubMessage>(in inputPayload: Any?, comparedWith payload: M) -> String? {
        check(inputPayload, against: payload).field
    }

    /// `unknownField`, with the payload encoded again for the comparison (nil when the input had no
    /// fields). When the request's own payload bytes (in `envelope`) are the same as the payload
    /// encoded again, as they are from a client that encodes as this codec does, it has no field
    /// the type lacks, and the trees need no comparing.
    static func check<M: HubMessage>(_ inputPayload: Any?, against payload: M, in envelope: Data? = nil, reencoded: Data? = nil)
        -> (field: String?, encoded: Data?)
    {
        // A payload that does not encode again cannot be compared; the decode already passed.
        guard let inputPayload, let object = inputPayload as? [String: Any], !object.isEmpty,
            let reencoded = reencoded ?? (try? encoder.encode(payload))
        else { return (nil, nil) }
        if let envelope, let range = scanMember(envelope, "payload"), range.count == reencoded.count,
            envelope.member(at: range) == reencoded
        {
            return (nil, reencoded)
        }
        // Our own encoding always parses; nil only skips the unknown-field check.
        guard let known = try? JSONSerialization.jsonObject(with: reencoded, options: [.fragmentsAllowed]) else { return (nil, nil) }
        return (firstExtraKey(inputPayload, known, path: ""), reencoded)
    }

    private static func firstExtraKey(_ input: Any, _ known: Any, path: String) -> String? {
        switch (input, known) {
        case let (input as [String: Any], known as [String: Any]):
            for key in input.keys.sorted() {
                let value = input[key]!
                let child = path.isEmpty ? key : "\(path).\(key)"
                guard let knownValue = known[key] else {
                    if value is NSNull { continue }
                    return child
                }
                if let extra = firstExtraKey(value, knownValue, path: child) { return extra }
            }
            return nil
        case let (input as [Any], known as [Any]):
            for (index, pair) in zip(input, known).enumerated() {
                if let extra = firstExtraKey(pair.0, pair.1, path: "\(path)[\(index)]") { return extra }
            }
            return nil
        default:
            return nil
        }
    }
}
