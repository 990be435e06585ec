import Foundation
import HubProtocol
import Tags

/// The dispatcher's copy of the registry, kept current from its change stream, with the
/// posting lists that turn a tag expression into candidate installations without a scan. It holds
/// every hub's installations, by their keys (`HubScope`); its posting lists are by the hub's
/// prefix and the tag or user, so one hub's expression finds only that hub's installations, at
/// the same cost however many hubs there are.
public struct InstallationIndex {
    public init() {}

    public private(set) var installations: [String: Installation] = [:]
    private var byTag: [String: Set<String>] = [:]
    private var byUser: [String: Set<String>] = [:]
    /// Each hub's installations, by the hub's prefix ("" for the default hub), for a send to all of them.
    private var byHub: [String: Set<String>] = [:]
    /// Installations of one app mostly share their tag lists and templates: each distinct one is
    /// kept once and the installations share its storage.
    private var sharedTags: Set<[String]> = []
    private var sharedTemplates: Set<[String: InstallationTemplate]> = []
    /// Candidates already put in order, by the tags that chose them: a broadcast to the same tags
    /// again takes the list as it is, instead of sorting every matching id and looking each up. A
    /// change to the index starts a new cache (a copy of the index keeps its own, still right for it).
    private var ordered = OrderedCandidates()

    public mutating func replace(with snapshot: RegistrySnapshot) {
        ordered = OrderedCandidates()
        installations = [:]
        byTag = [:]
        byUser = [:]
        byHub = [:]
        for installation in snapshot.installations { insert(installation) }
    }

    public mutating func apply(_ change: InstallationChanged) {
        ordered = OrderedCandidates()
        remove(change.installationId)
        if change.change == .upserted, let installation = change.installation { insert(installation) }
    }

    private mutating func insert(_ incoming: Installation) {
        var installation = incoming
        // Lists no installation uses any more would stay in the tables; past twice the
        // installations the tables start over, which only costs sharing for a while.
        if sharedTags.count > 2 * max(1_000, installations.count) { sharedTags = [] }
        if sharedTemplates.count > 2 * max(1_000, installations.count) { sharedTemplates = [] }
        installation.tags = sharedTags.insert(installation.tags).memberAfterInsert
        if let templates = installation.templates {
            installation.templates = sharedTemplates.insert(templates).memberAfterInsert
        }
        let id = installation.installationId
        let prefix = HubScope.of(key: id).prefix
        installations[id] = installation
        for tag in installation.tags { byTag[prefix + tag, default: []].insert(id) }
        for template in (installation.templates ?? [:]).values {
            for tag in template.tags ?? [] { byTag[prefix + tag, default: []].insert(id) }
        }
        if let user = installation.userId { byUser[prefix + user, default: []].insert(id) }
        byHub[prefix, default: []].insert(id)
    }

    private mutating func remove(_ id: String) {
        guard let old = installations.removeValue(forKey: id) else { return }
        let prefix = HubScope.of(key: id).prefix
        var tags = old.tags
        for template in (old.templates ?? [:]).values { tags += template.tags ?? [] }
        for tag in tags {
            byTag[prefix + tag]?.remove(id)
            if byTag[prefix + tag]?.isEmpty == true { byTag[prefix + tag] = nil }
        }
        if let user = old.userId {
            byUser[prefix + user]?.remove(id)
            if byUser[prefix + user]?.isEmpty == true { byUser[prefix + user] = nil }
        }
        byHub[prefix]?.remove(id)
        if byHub[prefix]?.isEmpty == true { byHub[prefix] = nil }
    }

    public var count: Int { installations.count }

    /// The installation of a key (`HubScope.key`).
    public func installation(_ id: String) -> Installation? { installations[id] }

    /// The installations of a user, by the user's key (`HubScope.key`).
    public func installations(ofUser user: String) -> [Installation] {
        (byUser[user] ?? []).sorted().compactMap { installations[$0] }
    }

    /// Installations of `scope`'s hub that can match `expression`: all of them when it can match
    /// without any tag (as `!Sports` can), otherwise those holding at least one of its tags.
    public func candidates(for expression: TagExpression, in scope: HubScope = HubScope(named: nil)) -> [Installation] {
        if expression.matchesWithoutTags { return everyone(in: scope) }
        let tags = expression.tags
        return ordered.list(for: scope.prefix + "\u{0}" + tags.joined(separator: "\u{0}")) { findCandidates(tags, in: scope) }
    }

    private func findCandidates(_ tags: [String], in scope: HubScope) -> [Installation] {
        var ids = Set<String>()
        for tag in tags {
            if tag.hasPrefix(Tag.installationPrefix) {
                ids.insert(scope.key(String(tag.dropFirst(Tag.installationPrefix.count))))
            } else if tag.hasPrefix(Tag.userPrefix) {
                ids.formUnion(byUser[scope.prefix + String(tag.dropFirst(Tag.userPrefix.count))] ?? [])
            } else {
                ids.formUnion(byTag[scope.prefix + tag] ?? [])
            }
        }
        return ids.sorted().compactMap { installations[$0] }
    }

    /// Every installation of the default hub, in id order.
    public var all: [Installation] { everyone(in: HubScope(named: nil)) }

    /// Every installation of `scope`'s hub, in key order.
    public func everyone(in scope: HubScope) -> [Installation] {
        ordered.list(for: scope.prefix) { (byHub[scope.prefix] ?? []).sorted().compactMap { installations[$0] } }
    }

    /// How many hubs have installations here.
    public var hubCount: Int { byHub.count }
}

/// Lists of installations in id order, kept until the index changes: at most `limit` of them,
/// then the cache starts over, so that many different expressions cannot make it grow.
final class OrderedCandidates {
    static let limit = 32
    private var lists: [String: [Installation]] = [:]

    /// The list cached under `key` (the tags that chose it; "" for all), made by `make` if none is.
    func list(for key: String, make: () -> [Installation]) -> [Installation] {
        if let list = lists[key] { return list }
        if lists.count >= Self.limit { lists = [:] }
        let list = make()
        lists[key] = list
        return list
    }
}
