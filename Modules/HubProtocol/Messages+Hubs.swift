import Foundation

/// A shared-access policy of a hub: a name, its rights (Listen, Send, Manage) and two keys, either
/// of which signs, so that one can be regenerated while clients move to the other.
public struct HubPolicy: Codable, Sendable, Equatable {
    public var name: String
    public var rights: [String]
    /// The primary key: 32 random bytes in base64.
    public var key: String
    public var secondaryKey: String?

    public init(name: String, rights: [String], key: String, secondaryKey: String?) {
        self.name = name
        self.rights = rights
        self.key = key
        self.secondaryKey = secondaryKey
    }
}

/// A hub of the namespace with its policies.
public struct HubDescription: Codable, Sendable, Equatable {
    public var name: String
    public var createdAt: Date
    public var policies: [HubPolicy]
    /// How many hubs of this name were made, this one included; absent for the first. Its keys
    /// in the stores carry it (`HubScope`), so a hub made again never sees what a deleted one held.
    public var generation: Int?
    /// The hub's own limits, where they differ from the configuration's.
    public var limits: HubLimits?

    public init(name: String, createdAt: Date, policies: [HubPolicy], generation: Int? = nil, limits: HubLimits? = nil) {
        self.name = name
        self.createdAt = createdAt
        self.policies = policies
        self.generation = generation
        self.limits = limits
    }

    /// The hub's scope in a namespace whose default hub is `defaultHub`.
    public func scope(defaultHub: String) -> HubScope { HubScope(hub: name, defaultHub: defaultHub, generation: generation ?? 1) }
}

/// Makes a hub, with the two default policies (DefaultListenSharedAccessSignature and
/// DefaultFullSharedAccessSignature). Needs a namespace Manage key. `conflict` when it exists.
public struct HubCreate: HubRequest {
    public typealias Reply = HubDescription
    public static let messageType: MessageType = "hub.create"
    public var name: String
    public init(name: String) { self.name = name }
}

extension HubDescription: HubMessage {
    public static let messageType: MessageType = "hub.description"
}

/// A hub with its policies and keys. Needs a namespace Manage key.
public struct HubGet: HubRequest {
    public typealias Reply = HubDescription
    public static let messageType: MessageType = "hub.get"
    public var name: String
    public init(name: String) { self.name = name }
}

/// The namespace's hubs, by name; the default hub first.
public struct HubListRequest: HubRequest {
    public typealias Reply = HubList
    public static let messageType: MessageType = "hub.list"
    public init() {}
}

public struct HubList: HubMessage {
    public static let messageType: MessageType = "hub.list.reply"
    public var hubs: [HubSummary]
    public init(hubs: [HubSummary]) { self.hubs = hubs }
}

public struct HubSummary: Codable, Sendable, Equatable {
    public var name: String
    public var createdAt: Date?
    public var isDefault: Bool
    public var installations: Int
    public init(name: String, createdAt: Date?, isDefault: Bool, installations: Int) {
        self.name = name
        self.createdAt = createdAt
        self.isDefault = isDefault
        self.installations = installations
    }
}

/// Deletes a hub and everything it owns. The default hub cannot be deleted. Needs a namespace Manage key.
public struct HubDelete: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "hub.delete"
    public var name: String
    public init(name: String) { self.name = name }
}

/// Adds or changes a hub's policy (its keys are made when it is new, and kept when it changes).
public struct HubPolicyPut: HubRequest {
    public typealias Reply = HubPolicy
    public static let messageType: MessageType = "hub.policy.put"
    public var hub: String
    public var name: String
    public var rights: [String]
    public init(hub: String, name: String, rights: [String]) {
        self.hub = hub
        self.name = name
        self.rights = rights
    }
}

extension HubPolicy: HubMessage {
    public static let messageType: MessageType = "hub.policy"
}

/// Removes a hub's policy; tokens it signed are refused from then on.
public struct HubPolicyDelete: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "hub.policy.delete"
    public var hub: String
    public var name: String
    public init(hub: String, name: String) {
        self.hub = hub
        self.name = name
    }
}

/// Makes a new primary or secondary key for a hub's policy; the other key keeps working.
public struct HubKeysRegenerate: HubRequest {
    public typealias Reply = HubPolicy
    public static let messageType: MessageType = "hub.keys.regenerate"
    public var hub: String
    public var name: String
    /// `PrimaryKey` or `SecondaryKey`, as Azure names them.
    public var policyKey: String
    public init(hub: String, name: String, policyKey: String) {
        self.hub = hub
        self.name = name
        self.policyKey = policyKey
    }
}

/// What the services read to check credentials: every hub's policies, when they changed since
/// `after` (the catalog's version a service holds). Needs a namespace Manage key.
public struct HubCatalogRequest: HubRequest {
    public typealias Reply = HubCatalog
    public static let messageType: MessageType = "hub.catalog"
    public var after: UInt64?
    public init(after: UInt64?) { self.after = after }
}

public struct HubCatalog: HubMessage {
    public static let messageType: MessageType = "hub.catalog.reply"
    /// Grows with every change to a hub or a policy.
    public var version: UInt64
    /// Every hub with policies of its own, when the version is not `after`'s; nil when unchanged.
    /// The default hub is here only once its policies were changed; before, they are `keys.json`'s.
    public var hubs: [HubDescription]?
    public init(version: UInt64, hubs: [HubDescription]?) {
        self.version = version
        self.hubs = hubs
    }
}

/// A hub's own limits; each absent one is the configuration's (`limits.…PerHub`), and 0 is none.
public struct HubLimits: Codable, Sendable, Equatable {
    /// Requests per second to one service, from all the hub's keys.
    public var requestsPerSecond: Int?
    public var sendsPerSecond: Int?
    public var installations: Int?

    public init(requestsPerSecond: Int? = nil, sendsPerSecond: Int? = nil, installations: Int? = nil) {
        self.requestsPerSecond = requestsPerSecond
        self.sendsPerSecond = sendsPerSecond
        self.installations = installations
    }
}

/// Sets a hub's own limits (those given; `0` lifts one). Needs a namespace Manage key.
public struct HubLimitsPut: HubRequest {
    public typealias Reply = HubDescription
    public static let messageType: MessageType = "hub.limits.put"
    public var hub: String
    public var limits: HubLimits
    public init(hub: String, limits: HubLimits) {
        self.hub = hub
        self.limits = limits
    }
}
