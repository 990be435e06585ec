import Foundation

/// The name of a message on the wire, such as "health" or "installation.upsert".
public struct MessageType: RawRepresentable, Hashable, Codable, Sendable, ExpressibleByStringLiteral,
    CustomStringConvertible
{
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }
    public init(from decoder: Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }
}

/// A message that can travel in an envelope.
public protocol HubMessage: Codable, Sendable, Equatable {
    static var messageType: MessageType { get }
    /// The payload's JSON exactly as `HubCodec`'s encoder writes it, written without the encoder;
    /// nil to leave it to the encoder. For a reply on the hot path (a send's acceptance).
    func writtenJSON() -> Data?
    /// The payload read from exactly that form without the decoder; nil for any other bytes, which
    /// the decoder then reads.
    static func readWritten(_ bytes: UnsafeRawBufferPointer) -> Self?
}

extension HubMessage {
    public func writtenJSON() -> Data? { nil }
    public static func readWritten(_ bytes: UnsafeRawBufferPointer) -> Self? { nil }
}

/// A request, and the reply type a success carries. Failures carry `ErrorReply`.
public protocol HubRequest: HubMessage {
    associatedtype Reply: HubMessage
}
