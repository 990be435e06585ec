/// What a key may do, as in Notification Hubs.
/// Listen: create, read and delete installations. Send: send. Manage: everything.
public struct AccessRights: OptionSet, Sendable, Hashable, Codable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let listen = AccessRights(rawValue: 1)
    public static let send = AccessRights(rawValue: 2)
    public static let manage = AccessRights(rawValue: 4)
    public static let all: AccessRights = [.listen, .send, .manage]

    static let names: [(AccessRights, String)] = [(.listen, "Listen"), (.send, "Send"), (.manage, "Manage")]

    public init(names: [String]) throws(AuthError) {
        var rights: AccessRights = []
        for name in names {
            guard let right = AccessRights.names.first(where: { $0.1.caseInsensitiveCompare(name) == .orderedSame })?.0 else {
                throw AuthError(.unauthorized, "unknown right '\(name)'; rights are Listen, Send and Manage")
            }
            rights.insert(right)
        }
        self = rights
    }

    public var names: [String] { AccessRights.names.filter { contains($0.0) }.map(\.1) }

    /// Manage implies every other right.
    public func allows(_ needed: AccessRights) -> Bool {
        contains(.manage) || isSuperset(of: needed)
    }

    public var description: String { names.joined(separator: ",") }

    public init(from decoder: Decoder) throws {
        try self.init(names: try decoder.singleValueContainer().decode([String].self))
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(names)
    }
}

/// An authorization failure: `unauthorized` for a missing or bad credential, `forbidden` for a
/// good credential without the right.
public struct AuthError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable { case unauthorized, forbidden }
    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "\(kind.rawValue): \(message)" }
}
