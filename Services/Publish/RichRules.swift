import Auth
import Foundation
import HubProtocol

/// What makes a rich send acceptable. Returns the silent notification to send (without its
/// reference, which needs the stored payload's id).
enum RichRules {
    static func validate(_ rich: SendRichNotification, maxBytes: Int) throws(HubError) -> SendNotification {
        guard !rich.payload.isEmpty else { throw HubError(.invalidPayload, "the rich payload is empty") }
        guard rich.payload.count <= maxBytes else {
            throw HubError(.payloadTooLarge, "the rich payload is \(rich.payload.count) bytes; the limit is \(maxBytes)")
        }
        let parts = rich.contentType.split(separator: "/")
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty, rich.contentType.count <= 128 else {
            throw HubError(.invalidArgument, "contentType '\(rich.contentType)' must be a media type such as image/png")
        }
        guard !rich.richType.isEmpty, rich.richType.count <= 32 else {
            throw HubError(.invalidArgument, "richType must be 1 to 32 characters, such as image, url, sound or file")
        }
        guard !rich.message.isEmpty, rich.message.utf8.count <= 1024 else {
            throw HubError(.invalidArgument, "message must be 1 to 1024 bytes: the text shown with the rich content")
        }
        if rich.keyId != nil {
            guard rich.userId != nil, rich.tagExpression == nil, rich.installationId == nil else {
                throw HubError(.invalidArgument, "a rich payload encrypted end to end (keyId) is for one user: give userId, and no tag expression or installation")
            }
            try EncryptedRecord.check(bytes: [UInt8](rich.payload), "the rich payload")
        }
        if let claimed = rich.sha256 {
            let actual = Crypto.sha256(rich.payload).hexString
            guard claimed.lowercased() == actual else {
                throw HubError(.invalidArgument, "sha256 \(claimed) does not match the payload, whose SHA-256 is \(actual)")
            }
        }
        let body = #"{"content-available":1,"richType":\#(jsonString(rich.richType)),"message":\#(jsonString(rich.message))}"#
        return SendNotification(
            idempotencyKey: rich.idempotencyKey, format: .native, body: body, tagExpression: rich.tagExpression,
            installationId: rich.installationId, userId: rich.userId, timeToLive: rich.timeToLive)
    }

    static func jsonString(_ text: String) -> String {
        // A string always encodes.
        String(decoding: (try? JSONEncoder().encode(text)) ?? Data("\"\"".utf8), as: UTF8.self)
    }
}
