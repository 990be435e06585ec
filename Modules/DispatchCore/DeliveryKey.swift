/// A delivery id with its hash worked out once, for the sets and tables that follow a delivery
/// from its plan to its acknowledgement: the dispatcher's, and its store's until the group commits.
///
/// A delivery id is some 60 bytes (`notification/installation/template`), and each lookup by a
/// `String` hashed all of them again: some 15 times per delivery, a sixth of the dispatcher's
/// instructions. A key hashes its id once, with the process's seeded hasher as `String` does, so a
/// table keyed by it is as hard to flood with collisions; a lookup then hashes one integer, and
/// compares ids only when the hashes agree. Keys live in memory only: the hash is this process's.
public struct DeliveryKey: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let id: String
    private let hash: Int

    public init(_ id: String) {
        self.id = id
        hash = id.hashValue
    }

    public init(stringLiteral id: String) { self.init(id) }

    public static func == (lhs: DeliveryKey, rhs: DeliveryKey) -> Bool { lhs.hash == rhs.hash && lhs.id == rhs.id }

    public func hash(into hasher: inout Hasher) { hasher.combine(hash) }

    public var description: String { id }
}
