import Foundation
import HubProtocol
import Tags

/// The dispatcher's copy of the registry, kept current from its change stream, with the
/// posting lists that turn a tag expression into candidate installations without a scan. It holds
/// every hub's installations, by their keys (`HubScope`); its posting lists are by the hub's
/// prefix and the tag or user, so one hub's expression finds only that hub's installations, at
/// the same cost however many hubs there are.
///
/// A million installations fit in a little over 100 bytes each: an installation is a slot, its
/// fields in columns (`Slots`), its push channel in one byte buffer, and what installations share
/// (tag lists, templates, users) kept once and named by a number. Posting lists hold slots, four
/// bytes each. An `Installation` is made up from its slot when asked for; the index keeps what
/// planning and delivery read (not `createdAt` or `lastSeen`, which the registry keeps).
public struct InstallationIndex {
    public init() {}

    /// Each installation's slot, by key.
    private var slotOf: [String: Int32] = [:]
    fileprivate var slots = Slots()
    private var byTag: [String: Set<Int32>] = [:]
    private var byUser: [String: Set<Int32>] = [:]
    /// The slots of each hub but the default one, by the hub's prefix. The default hub's are every
    /// slot whose key has no prefix.
    private var byHub: [String: Set<Int32>] = [:]
    /// Tag lists, templates and user ids, each distinct one kept once and named by its number.
    private var tagLists = Interned<[String]>()
    private var templateSets = Interned<[String: InstallationTemplate]>()
    private var users = Interned<String>()
    /// Slots in key order, by the tags that chose them: a broadcast to the same tags again takes
    /// the list as it is instead of sorting every matching key. A change to the index starts a new
    /// cache (a copy of the index keeps its own, still right for it).
    private var ordered = OrderedCandidates()

    public mutating func replace(with snapshot: RegistrySnapshot) {
        self = InstallationIndex()
        slotOf.reserveCapacity(snapshot.installations.count)
        for installation in snapshot.installations { insert(installation) }
    }

    public mutating func apply(_ change: InstallationChanged) {
        ordered = OrderedCandidates()
        remove(change.installationId)
        if change.change == .upserted, let installation = change.installation { insert(installation) }
    }

    private mutating func insert(_ installation: Installation) {
        let id = installation.installationId
        let prefix = HubScope.of(key: id).prefix
        let slot = slots.add(
            id: id, channel: installation.pushChannel, platform: installation.platform, version: installation.version,
            expiry: installation.expirationTime, tags: tagLists.take(installation.tags),
            templates: installation.templates.map { templateSets.take($0) } ?? -1,
            user: installation.userId.map { users.take($0) } ?? -1,
            rare: installation.endpoints == nil && installation.pushChannelObject == nil
                ? nil : Rare(endpoints: installation.endpoints, pushChannelObject: installation.pushChannelObject))
        slotOf[id] = slot
        forEachTag(of: installation) { byTag[prefix + $0, default: []].insert(slot) }
        if let user = installation.userId { byUser[prefix + user, default: []].insert(slot) }
        if !prefix.isEmpty { byHub[prefix, default: []].insert(slot) }
    }

    private mutating func remove(_ id: String) {
        guard let slot = slotOf.removeValue(forKey: id), let old = installation(at: slot) else { return }
        let prefix = HubScope.of(key: id).prefix
        forEachTag(of: old) { tag in
            byTag[prefix + tag]?.remove(slot)
            if byTag[prefix + tag]?.isEmpty == true { byTag[prefix + tag] = nil }
        }
        if let user = old.userId {
            byUser[prefix + user]?.remove(slot)
            if byUser[prefix + user]?.isEmpty == true { byUser[prefix + user] = nil }
        }
        if !prefix.isEmpty {
            byHub[prefix]?.remove(slot)
            if byHub[prefix]?.isEmpty == true { byHub[prefix] = nil }
        }
        tagLists.release(slots.tags[Int(slot)])
        templateSets.release(slots.templates[Int(slot)])
        users.release(slots.users[Int(slot)])
        slots.free(slot)
    }

    /// The installation's own tags and its templates' tags, each as often as it is listed.
    private func forEachTag(of installation: Installation, _ body: (String) -> Void) {
        for tag in installation.tags { body(tag) }
        for template in (installation.templates ?? [:]).values {
            for tag in template.tags ?? [] { body(tag) }
        }
    }

    /// The installation in a slot, made up from its columns.
    private func installation(at slot: Int32) -> Installation? {
        let at = Int(slot)
        guard at < slots.ids.count, let id = slots.ids[at] else { return nil }
        var installation = Installation(
            installationId: id, platform: slots.platform(at), pushChannel: slots.channel(at), tags: tagLists[slots.tags[at]] ?? [],
            userId: users[slots.users[at]], templates: templateSets[slots.templates[at]],
            expirationTime: slots.expiries[at].isNaN ? nil : Date(timeIntervalSince1970: slots.expiries[at]))
        installation.version = slots.versions[at] == 0 ? nil : slots.versions[at]
        if let rare = slots.rare[slot] {
            installation.endpoints = rare.endpoints
            installation.pushChannelObject = rare.pushChannelObject
        }
        return installation
    }

    public var count: Int { slotOf.count }
    /// Bytes of push channels held, for the tests.
    var channelBytesHeld: Int { slots.channelBytes.count }

    /// The installation of a key (`HubScope.key`).
    public func installation(_ id: String) -> Installation? { slotOf[id].flatMap(installation(at:)) }

    /// The installations of a user, by the user's key (`HubScope.key`).
    public func installations(ofUser user: String) -> [Installation] {
        inKeyOrder(byUser[user] ?? []).compactMap(installation(at:))
    }

    /// Installations of `scope`'s hub that can match `expression`: all of them when it can match
    /// without any tag (as `!Sports` can), otherwise those holding at least one of its tags; in
    /// key order, each made up as it is read.
    public func candidates(for expression: TagExpression, in scope: HubScope = HubScope(named: nil)) -> Candidates {
        if expression.matchesWithoutTags { return everyone(in: scope) }
        let tags = expression.tags
        return Candidates(index: self, slots: ordered.list(for: scope.prefix + "\u{0}" + tags.joined(separator: "\u{0}")) {
            findCandidates(tags, in: scope)
        })
    }

    private func findCandidates(_ tags: [String], in scope: HubScope) -> [Int32] {
        var found = Set<Int32>()
        for tag in tags {
            if tag.hasPrefix(Tag.installationPrefix) {
                if let slot = slotOf[scope.key(String(tag.dropFirst(Tag.installationPrefix.count)))] { found.insert(slot) }
            } else if tag.hasPrefix(Tag.userPrefix) {
                found.formUnion(byUser[scope.prefix + String(tag.dropFirst(Tag.userPrefix.count))] ?? [])
            } else {
                found.formUnion(byTag[scope.prefix + tag] ?? [])
            }
        }
        return inKeyOrder(found)
    }

    /// Every installation of the default hub, in key order.
    public var all: [Installation] { Array(everyone(in: HubScope(named: nil))) }

    /// Every installation of `scope`'s hub, in key order.
    public func everyone(in scope: HubScope) -> Candidates {
        Candidates(index: self, slots: ordered.list(for: scope.prefix) {
            if !scope.prefix.isEmpty { return inKeyOrder(byHub[scope.prefix] ?? []) }
            // The default hub's: every slot whose key has no hub's prefix.
            var mine: [Int32] = []
            mine.reserveCapacity(slotOf.count)
            for (at, id) in slots.ids.enumerated() where id.map({ HubScope.of(key: $0).prefix.isEmpty }) ?? false { mine.append(Int32(at)) }
            return inKeyOrder(mine)
        })
    }

    /// Slots sorted by their keys.
    private func inKeyOrder<S: Sequence>(_ found: S) -> [Int32] where S.Element == Int32 {
        found.sorted { slots.ids[Int($0)]! < slots.ids[Int($1)]! }
    }

    /// How many hubs have installations here.
    public var hubCount: Int { byHub.count + (slotOf.count > byHub.values.reduce(0) { $0 + $1.count } ? 1 : 0) }

    /// Installations chosen from the index, in key order, each made up from its slot as it is
    /// read; or a few given whole.
    public struct Candidates: RandomAccessCollection {
        public typealias Indices = Range<Int>
        private let index: InstallationIndex?
        private let slots: [Int32]
        private let given: [Installation]

        init(index: InstallationIndex, slots: [Int32]) {
            self.index = index
            self.slots = slots
            given = []
        }

        public init(_ installations: [Installation]) {
            index = nil
            slots = []
            given = installations
        }

        public var startIndex: Int { 0 }
        public var endIndex: Int { index == nil ? given.count : slots.count }
        public subscript(position: Int) -> Installation {
            guard let index else { return given[position] }
            return index.installation(at: slots[position])!
        }

        /// The key of the installation at `position`, without making it up.
        public func key(at position: Int) -> String {
            guard let index else { return given[position].installationId }
            return index.slots.ids[Int(slots[position])]!
        }
    }
}

/// Installation fields that few installations have: an agent's apps' push endpoints, and how a
/// browser's subscription was written.
struct Rare {
    var endpoints: [String: PushEndpoint]?
    var pushChannelObject: Bool?
}

/// The installations' fields, a column each, by slot; a freed slot is taken again by the next one added.
struct Slots {
    /// nil: a free slot.
    var ids: [String?] = []
    var platforms: [UInt8] = []
    /// Each push channel's place in `channelBytes`: its start and length.
    var channelStarts: [UInt32] = []
    var channelLengths: [UInt16] = []
    var channelBytes: [UInt8] = []
    /// Bytes of `channelBytes` no slot uses any more; past half of them, the buffer is written anew.
    var channelGarbage = 0
    var versions: [UInt64] = []
    /// Seconds since 1970; NaN for none.
    var expiries: [Double] = []
    /// Numbers of interned tag lists, template sets and users; -1 for none.
    var tags: [Int32] = []
    var templates: [Int32] = []
    var users: [Int32] = []
    var rare: [Int32: Rare] = [:]
    /// Platforms by number, and the number of each; 255 for a name not listed, kept in `otherPlatforms`.
    static let platformNames = Platform.allCases.map(\.rawValue)
    var otherPlatforms: [Int32: String] = [:]
    private var free: [Int32] = []

    mutating func add(
        id: String, channel: String, platform: String, version: UInt64?, expiry: Date?, tags tagList: Int32, templates templateSet: Int32,
        user: Int32, rare extra: Rare?
    ) -> Int32 {
        let slot: Int32
        if let reused = free.popLast() {
            slot = reused
        } else {
            slot = Int32(ids.count)
            ids.append(nil)
            platforms.append(0)
            channelStarts.append(0)
            channelLengths.append(0)
            versions.append(0)
            expiries.append(.nan)
            tags.append(-1)
            templates.append(-1)
            users.append(-1)
        }
        let at = Int(slot)
        ids[at] = id
        if let number = Self.platformNames.firstIndex(of: platform) {
            platforms[at] = UInt8(number)
        } else {
            platforms[at] = 255
            otherPlatforms[slot] = platform
        }
        setChannel(channel, at: at)
        versions[at] = version ?? 0
        expiries[at] = expiry?.timeIntervalSince1970 ?? .nan
        tags[at] = tagList
        templates[at] = templateSet
        users[at] = user
        rare[slot] = extra
        return slot
    }

    mutating func free(_ slot: Int32) {
        let at = Int(slot)
        ids[at] = nil
        channelGarbage += Int(channelLengths[at])
        channelLengths[at] = 0
        otherPlatforms[slot] = nil
        rare[slot] = nil
        free.append(slot)
    }

    func platform(_ at: Int) -> String {
        platforms[at] == 255 ? otherPlatforms[Int32(at)] ?? "" : Self.platformNames[Int(platforms[at])]
    }

    func channel(_ at: Int) -> String {
        let start = Int(channelStarts[at])
        return String(decoding: channelBytes[start..<start + Int(channelLengths[at])], as: UTF8.self)
    }

    private mutating func setChannel(_ channel: String, at: Int) {
        var channel = channel
        let length = channel.utf8.count
        // A channel longer than a length can say (none is: the registry takes 1,024 bytes at most) is cut.
        let kept = min(length, Int(UInt16.max))
        if channelGarbage > 1 << 16, channelGarbage > channelBytes.count / 2 { compactChannels() }
        channelStarts[at] = UInt32(channelBytes.count)
        channelLengths[at] = UInt16(kept)
        channel.withUTF8 { channelBytes.append(contentsOf: $0.prefix(kept)) }
    }

    /// Writes the live slots' channels into a new buffer, dropping what freed slots left.
    private mutating func compactChannels() {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(channelBytes.count - channelGarbage)
        for at in ids.indices where ids[at] != nil {
            let start = Int(channelStarts[at])
            channelStarts[at] = UInt32(bytes.count)
            bytes.append(contentsOf: channelBytes[start..<start + Int(channelLengths[at])])
        }
        channelBytes = bytes
        channelGarbage = 0
    }
}

/// Values that many installations share, each kept once with how many use it, named by a number.
struct Interned<Value: Hashable> {
    private var values: [Value?] = []
    private var uses: [Int32] = []
    private var numbers: [Value: Int32] = [:]
    private var free: [Int32] = []

    /// The value's number, counted as used once more.
    mutating func take(_ value: Value) -> Int32 {
        if let number = numbers[value] {
            uses[Int(number)] += 1
            return number
        }
        let number: Int32
        if let reused = free.popLast() {
            number = reused
            values[Int(number)] = value
            uses[Int(number)] = 1
        } else {
            number = Int32(values.count)
            values.append(value)
            uses.append(1)
        }
        numbers[value] = number
        return number
    }

    /// Counts one use fewer of a number (-1: none); the value goes when none is left.
    mutating func release(_ number: Int32) {
        guard number >= 0 else { return }
        let at = Int(number)
        uses[at] -= 1
        guard uses[at] == 0, let value = values[at] else { return }
        numbers[value] = nil
        values[at] = nil
        free.append(number)
    }

    subscript(number: Int32) -> Value? { number >= 0 ? values[Int(number)] : nil }
}

/// Lists of slots in key order, kept until the index changes: at most `limit` of them, then the
/// cache starts over, so that many different expressions cannot make it grow.
final class OrderedCandidates {
    static let limit = 32
    private var lists: [String: [Int32]] = [:]

    /// The list cached under `key` (the tags that chose it; a hub's prefix for all), made by `make` if none is.
    func list(for key: String, make: () -> [Int32]) -> [Int32] {
        if let list = lists[key] { return list }
        if lists.count >= Self.limit { lists = [:] }
        let list = make()
        lists[key] = list
        return list
    }
}
