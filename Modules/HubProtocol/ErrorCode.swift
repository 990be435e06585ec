/// Stable error codes. Clients branch on these; the text beside them is for people.
/// A code, once published, keeps its meaning.
public enum ErrorCode: String, Codable, Sendable, CaseIterable {
    /// The frames around the envelope were not one body frame.
    case malformedFrames = "malformed_frames"
    /// The body frame was empty.
    case emptyMessage = "empty_message"
    /// The body was not a JSON envelope with v, type and id.
    case malformedEnvelope = "malformed_envelope"
    /// The envelope's protocol version is not one this service speaks.
    case unsupportedVersion = "unsupported_version"
    /// The envelope's type is not a request this service answers.
    case unknownType = "unknown_type"
    /// The payload did not decode as the type's fields require.
    case invalidPayload = "invalid_payload"
    /// The payload held a field the type does not have.
    case unknownField = "unknown_field"
    /// The message or one of its parts is over the size limit.
    case payloadTooLarge = "payload_too_large"
    /// No credential, or one that is expired, forged or unknown.
    case unauthorized = "unauthorized"
    /// A valid credential without the right to do this.
    case forbidden = "forbidden"
    case notFound = "not_found"
    case conflict = "conflict"
    /// The request named a version (an ETag in If-Match) that is no longer the current one.
    case preconditionFailed = "precondition_failed"
    case invalidTag = "invalid_tag"
    case invalidExpression = "invalid_expression"
    case invalidTemplate = "invalid_template"
    /// A field had a value outside what it allows.
    case invalidArgument = "invalid_argument"
    case expired = "expired"
    /// The position given (a user's cursor) names changes the store's history no longer holds: the
    /// store failed over to a replica that was behind, or was restored to a point in time. Sync in
    /// full from the history.
    case historyRewound = "history_rewound"
    /// The credential or agent sent more than its configured rate; retry after a second.
    case rateLimited = "rate_limited"
    /// The service, or one it depends on, cannot answer now; retrying later may work.
    case unavailable = "unavailable"
    case timeout = "timeout"
    case `internal` = "internal"
}
