import Foundation
import HubProtocol
import Tags

/// The dispatcher's copy of the registry, kept current from its change stream, with the
/// posting lists that turn a tag expression into candidate installations without a scan.
public struct InstallationIndex {
    public init() {}

    public private(set) var installations: [String: Installation] = [:]
    private var byTag: [String: Set<String>] = [:]
    private var byUser: [String: Set<String>] = [:]
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
        installations[id] = installation
        for tag in installation.tags { byTag[tag, default: []].insert(id) }
        for template in (installation.templates ?? [:]).values {
            for tag in template.tags ?? [] { byTag[tag, default: []].insert(id) }
        }
        if let user = installation.userId { byUser[user, default: []].insert(id) }
    }

    private mutating func remove(_ id: String) {
        guard let old = installations.removeValue(forKey: id) else { return }
        var tags = old.tags
        for template in (old.templates ?? [:]).values { tags += template.tags ?? [] }
        for tag in tags {
            byTag[tag]?.remove(id)
            if byTag[tag]?.isEmpty == true { byTag[tag] = nil }
        }
        if let user = old.userId {
            byUser[user]?.remove(id)
            if byUser[user]?.isEmpty == true { byUser[user] = nil }
        }
    }

    public var count: Int { installations.count }

    public func installation(_ id: String) -> Installation? { installations[id] }

    public func installations(ofUser user: String) -> [Installation] {
        (byUser[user] ?? []).sorted().compactMap { installations[$0] }
    }

    /// Installations that can match `expression`: all of them when it can match without any tag
    /// (as `!Sports` can), otherwise those holding at least one of its tags.
    public func candidates(for expression: TagExpression) -> [Installation] {
        if expression.matchesWithoutTags { return all }
        let tags = expression.tags
        return ordered.list(for: tags.joined(separator: "\u{0}")) { findCandidates(tags) }
    }

    private func findCandidates(_ tags: [String]) -> [Installation] {
        var ids = Set<String>()
        for tag in tags {
            if tag.hasPrefix(Tag.installationPrefix) {
                ids.insert(String(tag.dropFirst(Tag.installationPrefix.count)))
            } else if tag.hasPrefix(Tag.userPrefix) {
                ids.formUnion(byUser[String(tag.dropFirst(Tag.userPrefix.count))] ?? [])
            } else {
                ids.formUnion(byTag[tag] ?? [])
            }
        }
        return ids.sorted().compactMap { installations[$0] }
    }

    public var all: [Installation] { ordered.list(for: "") { installations.keys.sorted().compactMap { installations[$0] } } }
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
