/// A hub's name, by Notification Hubs' rules: 1 to 260 characters of letters, digits, periods,
/// hyphens and underscores, starting and ending with a letter or a digit. Names are compared
/// without regard to case, as the namespace's URLs are. A few names are the gateway's own paths.
public enum HubName {
    public static let maxLength = 260
    /// Top-level paths of the gateway, which no hub may take.
    public static let reserved: Set<String> = ["console", "inbox", "metrics", "up", "web"]

    /// Throws `invalid_argument` saying what is wrong with `name`.
    public static func check(_ name: String) throws(HubError) {
        guard !name.isEmpty, name.utf8.count <= maxLength else {
            throw HubError(.invalidArgument, "hub name '\(name.prefix(40))' must be 1 to \(maxLength) characters")
        }
        if let bad = name.utf8.first(where: { !isNameByte($0) }) {
            let shown = bad < 0x80 ? String(decoding: [bad], as: UTF8.self) : "non-ASCII"
            throw HubError(.invalidArgument, "hub name '\(name.prefix(60))' has '\(shown)'; hub names use only letters, digits, '.', '-' and '_'")
        }
        guard let first = name.utf8.first, let last = name.utf8.last, isAlphanumeric(first), isAlphanumeric(last) else {
            throw HubError(.invalidArgument, "hub name '\(name.prefix(60))' must start and end with a letter or a digit")
        }
        guard !reserved.contains(name.lowercased()) else {
            throw HubError(.invalidArgument, "'\(name)' is a path of the gateway's own (\(reserved.sorted().joined(separator: ", "))); choose another hub name")
        }
    }

    static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte)
    }

    static func isNameByte(_ byte: UInt8) -> Bool {
        isAlphanumeric(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }
}

/// Where one hub's things live among the namespace's. Every store of the hub keys what a hub owns
/// (installations, users, idempotency keys) by a key that names the hub: `hub/id`, the hub's
/// qualifier, a '/' (which no id, tag or user name may hold), then the id. The qualifier is the
/// hub's name in lower case, and `~N` after it for the Nth hub made under a name that was deleted
/// before (`news~2`), so that a hub made again never sees what the deleted one held. The default
/// hub, the one the config names and every store held before the namespace had hubs, keeps its ids
/// bare, so a data folder or database from before opens unchanged as that hub. Clients name hubs
/// by name; the services find the qualifier in the hub catalog.
public struct HubScope: Hashable, Sendable, CustomStringConvertible {
    /// The hub's name in lower case; empty for the default hub's scope made from a key alone.
    public let name: String
    public let isDefault: Bool
    /// The name, with `~N` for a generation after the first; empty for the default hub.
    public let qualifier: String
    /// What precedes an id in a key: empty for the default hub.
    public let prefix: String

    /// The scope of `hub` (nil: the default hub) in a namespace whose default hub is `defaultHub`,
    /// in its `generation` (1 for a name never deleted).
    public init(hub: String?, defaultHub: String, generation: Int = 1) {
        let lowered = (hub ?? defaultHub).lowercased()
        name = lowered
        isDefault = hub == nil || lowered == defaultHub.lowercased()
        qualifier = isDefault ? "" : generation > 1 ? "\(lowered)~\(generation)" : lowered
        prefix = isDefault ? "" : qualifier + "/"
    }

    /// The scope a send or a key names by its qualifier alone (nil: the default hub), where the
    /// default hub's name is not needed.
    public init(named qualifier: String?) {
        let lowered = qualifier?.lowercased() ?? ""
        name = String(lowered.prefix { $0 != "~" })
        isDefault = qualifier == nil
        self.qualifier = lowered
        prefix = isDefault ? "" : lowered + "/"
    }

    /// Scopes are the same when they key alike: the default hub's is one whatever name it was made with.
    public static func == (left: HubScope, right: HubScope) -> Bool { left.prefix == right.prefix }
    public func hash(into hasher: inout Hasher) { hasher.combine(prefix) }

    /// The name to put in an envelope for this hub: nil for the default hub.
    public var envelopeHub: String? { isDefault ? nil : name }

    /// What a stored send names its hub by: nil for the default hub.
    public var sendHub: String? { isDefault ? nil : qualifier }

    /// The store's key for `id` of this hub.
    public func key(_ id: String) -> String { isDefault ? id : prefix + id }

    /// Whether `key` is one of this hub's.
    public func owns(_ key: String) -> Bool {
        isDefault ? !key.utf8.contains(UInt8(ascii: "/")) : key.hasPrefix(prefix)
    }

    /// The id a key of this hub holds; a key of another hub comes back unchanged.
    public func id(_ key: String) -> String {
        guard !isDefault, key.hasPrefix(prefix) else { return key }
        return String(key.dropFirst(prefix.utf8.count))
    }

    /// The qualifier of the hub that owns `key`, or nil for the default hub.
    public static func hub(ofKey key: String) -> Substring? {
        guard let slash = key.utf8.firstIndex(of: UInt8(ascii: "/")) else { return nil }
        return key[..<slash]
    }

    /// The scope of the hub that owns `key`.
    public static func of(key: String) -> HubScope { HubScope(named: hub(ofKey: key).map(String.init)) }

    public var description: String { isDefault && name.isEmpty ? "(default hub)" : name }
}

extension Installation {
    /// The installation as its hub's store keys it: its id made the hub's key.
    public func keyed(in scope: HubScope) -> Installation {
        var keyed = self
        keyed.installationId = scope.key(installationId)
        return keyed
    }

    /// The installation as its hub's clients know it: its id without the hub.
    public func local(in scope: HubScope) -> Installation {
        var local = self
        local.installationId = scope.id(installationId)
        return local
    }
}

extension HubName {
    /// A byte of a policy's name: as a hub's, letters, digits, '.', '-' and '_'.
    public static func isPolicyByte(_ byte: UInt8) -> Bool { isNameByte(byte) }
}
