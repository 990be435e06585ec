import Foundation

/// A named template of an installation: a JSON body with placeholders such as `$(messageParam)`.
public struct InstallationTemplate: Codable, Sendable, Hashable {
    public var body: String
    /// An expression for the notification's expiry, in the template language.
    public var expiry: String?
    /// Tags of this template alone: a send must match them to use it.
    public var tags: [String]?
    public var headers: [String: String]?

    public init(body: String, expiry: String? = nil, tags: [String]? = nil, headers: [String: String]? = nil) {
        self.body = body
        self.expiry = expiry
        self.tags = tags
        self.headers = headers
    }
}

/// A device's registration with the hub.
public struct Installation: Codable, Sendable, Equatable {
    public var installationId: String
    /// "linux" for the hub's own agent; other platforms keep their names.
    public var platform: String
    /// The handle the hub delivers to: for an agent, the id it connects with.
    public var pushChannel: String
    public var tags: [String]
    public var userId: String?
    public var templates: [String: InstallationTemplate]?
    public var expirationTime: Date?
    public var createdAt: Date?
    public var lastSeen: Date?
    /// Set by the registry: the change-stream sequence of the write that stored this version. The ETag.
    public var version: UInt64?
    /// A linux installation's push endpoints (UnifiedPush and Web Push, RFC 8030), one per app
    /// registered with its agent, by endpoint id (`PushEndpoint.id(secret:)`). The agent sends them
    /// whole; a write that leaves them out (nil) keeps the stored ones.
    public var endpoints: [String: PushEndpoint]?
    /// A browser installation whose subscription was written as a JSON object (the REST reference,
    /// the JavaScript SDK): the REST API gives it back as one. Absent: as the JSON string the .NET
    /// and Java SDKs write and read. The push channel itself is the same canonical JSON text.
    public var pushChannelObject: Bool?

    public init(
        installationId: String, platform: String = "linux", pushChannel: String, tags: [String] = [],
        userId: String? = nil, templates: [String: InstallationTemplate]? = nil, expirationTime: Date? = nil,
        createdAt: Date? = nil, lastSeen: Date? = nil, endpoints: [String: PushEndpoint]? = nil
    ) {
        self.endpoints = endpoints
        self.installationId = installationId
        self.platform = platform
        self.pushChannel = pushChannel
        self.tags = tags
        self.userId = userId
        self.templates = templates
        self.expirationTime = expirationTime
        self.createdAt = createdAt
        self.lastSeen = lastSeen
    }
}

/// An app's push endpoint on an installation. Its URL ends in a secret that only the agent and the
/// app's server know; the hub keeps the secret's SHA-256 alone, which is the endpoint's id.
public struct PushEndpoint: Codable, Sendable, Equatable {
    /// The app's VAPID public key (RFC 8292): an uncompressed P-256 point, base64url. When set, a
    /// push must be signed with its private key.
    public var vapid: String?

    public init(vapid: String? = nil) { self.vapid = vapid }
}

/// Creates an installation or replaces it whole.
extension Installation {
    /// The version of the installation as stored, for ETag and If-Match: it changes with every write.
    public var etag: String { String(version ?? 0) }

    /// Whether an If-Match value (`*`, `"n"`, `W/"n"` or `n`) names this version.
    public func matches(ifMatch: String) -> Bool {
        var text = ifMatch.trimmingCharacters(in: .whitespaces)
        if text == "*" { return true }
        if text.hasPrefix("W/") { text.removeFirst(2) }
        return text.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) == etag
    }
}

public struct InstallationUpsert: HubRequest {
    public typealias Reply = InstallationReply
    public static let messageType: MessageType = "installation.upsert"
    public var installation: Installation
    /// A user token of the installation's `userId`: setting or changing the user needs it, or a Manage key.
    public var userToken: String?
    /// Only when the stored installation's `etag` is this one ("*": only when there is one).
    public var ifMatch: String?
    public init(installation: Installation, userToken: String? = nil, ifMatch: String? = nil) {
        self.installation = installation
        self.userToken = userToken
        self.ifMatch = ifMatch
    }
}

/// One JSON Patch (RFC 6902) operation on an installation.
public struct PatchOperation: Codable, Sendable, Equatable {
    /// "add", "remove" or "replace".
    public var op: String
    /// Such as "/tags", "/tags/World", "/pushChannel", "/userId" or "/templates/news/body".
    public var path: String
    public var value: JSONValue?

    public init(op: String, path: String, value: JSONValue? = nil) {
        self.op = op
        self.path = path
        self.value = value
    }
}

public struct InstallationPatch: HubRequest {
    public typealias Reply = InstallationReply
    public static let messageType: MessageType = "installation.patch"
    public var installationId: String
    public var operations: [PatchOperation]
    /// A user token of the `userId` the patch sets, as for `installation.upsert`.
    public var userToken: String?
    public init(installationId: String, operations: [PatchOperation], userToken: String? = nil) {
        self.installationId = installationId
        self.operations = operations
        self.userToken = userToken
    }
}

public struct InstallationGet: HubRequest {
    public typealias Reply = InstallationReply
    public static let messageType: MessageType = "installation.get"
    public var installationId: String
    public init(installationId: String) { self.installationId = installationId }
}

/// The installation that holds a push endpoint, whichever hub it is of (a namespace key only): an
/// app's endpoint URL (`/up/{secret}`) names no installation and no hub, so that it links an app
/// to nothing else on its device. `endpoint` is the endpoint's id (`PushEndpointSecret.id`). The
/// reply's installation id is its key, `hub/id` for a hub other than the default.
public struct InstallationByEndpoint: HubRequest {
    public typealias Reply = InstallationReply
    public static let messageType: MessageType = "installation.byEndpoint"
    public var endpoint: String
    public init(endpoint: String) { self.endpoint = endpoint }
}

public struct InstallationDelete: HubRequest {
    public typealias Reply = Ack
    public static let messageType: MessageType = "installation.delete"
    public var installationId: String
    /// Only when the stored installation's `etag` is this one ("*": whichever).
    public var ifMatch: String?
    public init(installationId: String, ifMatch: String? = nil) {
        self.installationId = installationId
        self.ifMatch = ifMatch
    }
}

public struct InstallationReply: HubMessage {
    public static let messageType: MessageType = "installation.reply"
    public var installation: Installation
    public init(installation: Installation) { self.installation = installation }
}

/// Lists installations, optionally only those with a tag and/or a push channel, a page at a time.
public struct InstallationList: HubRequest {
    public typealias Reply = InstallationPage
    public static let messageType: MessageType = "installation.list"
    public var tag: String?
    /// Only installations with exactly this push channel (a device token, channel URI or key).
    public var pushChannel: String?
    public var limit: Int?
    /// The `next` of the previous page.
    public var after: String?
    public init(tag: String? = nil, pushChannel: String? = nil, limit: Int? = nil, after: String? = nil) {
        self.tag = tag
        self.pushChannel = pushChannel
        self.limit = limit
        self.after = after
    }
}

public struct InstallationPage: HubMessage {
    public static let messageType: MessageType = "installation.page"
    public var installations: [Installation]
    /// Pass as `after` for the next page; absent on the last page.
    public var next: String?
    public init(installations: [Installation], next: String? = nil) {
        self.installations = installations
        self.next = next
    }
}

/// Asks the registry for every live installation and the change-stream sequence they stand at.
public struct RegistrySnapshotRequest: HubRequest {
    public typealias Reply = RegistrySnapshot
    public static let messageType: MessageType = "registry.snapshot"
    public init() {}
}

public struct RegistrySnapshot: HubMessage {
    public static let messageType: MessageType = "registry.snapshot.reply"
    public var sequence: UInt64
    public var installations: [Installation]
    public init(sequence: UInt64, installations: [Installation]) {
        self.sequence = sequence
        self.installations = installations
    }
}

/// An event on the registry's change stream.
public struct InstallationChanged: HubMessage {
    public static let messageType: MessageType = "installation.changed"
    public enum Change: String, Codable, Sendable { case upserted, deleted }
    public var change: Change
    public var installationId: String
    /// The installation as it is now; absent when deleted.
    public var installation: Installation?
    public init(change: Change, installationId: String, installation: Installation? = nil) {
        self.change = change
        self.installationId = installationId
        self.installation = installation
    }

    /// The payload as `HubCodec` writes it, around an installation already encoded by its encoder
    /// (`document`, as a store keeps it; nil when deleted): the registry publishes its stream from
    /// its log without decoding each installation to encode it again.
    public static func payload(installationId: String, document: Data?) -> Data {
        var out: [UInt8] = []
        out.reserveCapacity((document?.count ?? 0) + installationId.utf8.count + 64)
        out.append(contentsOf: document == nil ? #"{"change":"deleted","#.utf8 : #"{"change":"upserted","installation":"#.utf8)
        if let document {
            out.append(contentsOf: document)
            out.append(UInt8(ascii: ","))
        }
        out.append(contentsOf: #""installationId":"#.utf8)
        HubCodec.appendString(installationId, to: &out)
        out.append(UInt8(ascii: "}"))
        return Data(out)
    }
}
