/// A template that cannot be used; the message says what is wrong and where.
public struct TemplateError: Error, Equatable, Sendable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
