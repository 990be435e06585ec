import Foundation
import HubProtocol
import Tags
import Templates

/// One notification, rendered for one installation.
public struct PlannedDelivery: Equatable, Sendable {
    /// Its delivery id, hashed once (`DeliveryKey`).
    public var key: DeliveryKey
    public var deliveryId: String {
        get { key.id }
        set { key = DeliveryKey(newValue) }
    }
    public var installationId: String
    public var template: String?
    public var payload: String
    public var expiresAt: Date
    public var rich: RichReference? = nil
    /// The installation's platform, as its installation names it.
    public var platform: String = Platform.linux.rawValue
    /// The installation's push channel (its device handle), for a test send's results.
    public var pushChannel: String = ""
    /// The platform's own headers, from a native send or the template (lower-case names), for a
    /// push service.
    public var headers: [String: String]? = nil
    /// Set when the delivery cannot be made, with the outcome name to count it under (such as
    /// PnsUnavailable); it is recorded as failed at once and never sent.
    public var unreachable: String? = nil

    /// A Linux agent's delivery without a topic: one the store may hold in memory until its group
    /// commits, and one a broadcast parks for an agent away. (One with a topic replaces another
    /// in the store, so it is written at once, per device.)
    public var isPlainAgentDelivery: Bool {
        platform == Platform.linux.rawValue && headers?[AppPushMessage.topicHeader] == nil
    }

    public init(
        deliveryId: String, installationId: String, template: String?, payload: String, expiresAt: Date, rich: RichReference? = nil,
        platform: String = Platform.linux.rawValue
    ) {
        self.platform = platform
        key = DeliveryKey(deliveryId)
        self.installationId = installationId
        self.template = template
        self.payload = payload
        self.expiresAt = expiresAt
        self.rich = rich
    }
}

/// Turns an accepted notification into deliveries: resolves its targets from the index and, for a
/// template send, fills in every matching template of every target — one delivery per template,
/// as the source documents describe. Plain logic, no IO.
public struct TargetResolver {
    public init() {}

    private var templateCache: [String: Template] = [:]

    /// `include` narrows the targets by their keys, as to the installations of a dispatcher's
    /// shards, before each is read from the index and anything is rendered for it.
    public mutating func plan(
        _ notification: AcceptedNotification, index: InstallationIndex, now: Date, include: ((String) -> Bool)? = nil
    ) -> [PlannedDelivery] {
        var parked: [Int: Int] = [:]
        return plan(notification, index: index, now: now, include: include, parking: nil, parked: &parked)
    }

    /// Plans a broadcast stored once: the deliveries to Linux agents that `parks` says are away
    /// (by key) are not made but counted, by shard, in `parked`; each of them catches up when its
    /// agent comes back (`plan(_:for:index:now:)`), planned then as it would have been now.
    public mutating func plan(
        _ notification: AcceptedNotification, index: InstallationIndex, now: Date, include: ((String) -> Bool)? = nil,
        parking parks: ((String) -> Bool)?, parked: inout [Int: Int]
    ) -> [PlannedDelivery] {
        plan(notification, index: index, now: now, include: include, only: nil, parking: parks, parked: &parked)
    }

    /// The deliveries of `notification` to the one installation under `key`, as a broadcast plans
    /// them: none when it is not among the send's targets.
    public mutating func plan(_ notification: AcceptedNotification, for key: String, index: InstallationIndex, now: Date) -> [PlannedDelivery] {
        var parked: [Int: Int] = [:]
        return plan(notification, index: index, now: now, include: nil, only: key, parking: nil, parked: &parked)
    }

    private mutating func plan(
        _ notification: AcceptedNotification, index: InstallationIndex, now: Date, include: ((String) -> Bool)?, only: String?,
        parking parks: ((String) -> Bool)?, parked: inout [Int: Int]
    ) -> [PlannedDelivery] {
        let send = notification.send
        // The send's ids, user and tags are its hub's.
        let scope = HubScope(named: send.hub)
        var expression: TagExpression?
        if let text = send.tagExpression {
            // The publish service checked it; a failure here means a newer sender, so nothing
            // matches, and `unplannable` says why (the dispatcher logs it).
            do {
                expression = try TagExpression.parsed(text)
            } catch {
                return []
            }
        }
        let candidates: InstallationIndex.Candidates
        if let only {
            // One installation of a broadcast of its hub, whose tags the expression is asked of below.
            guard send.installationId == nil, send.installationIds == nil, send.userId == nil,
                HubScope.of(key: only) == scope, let installation = index.installation(only)
            else { return [] }
            candidates = .init([installation])
        } else if let expression {
            candidates = index.candidates(for: expression, in: scope)
        } else if let id = send.installationId {
            candidates = .init(index.installation(scope.key(id)).map { [$0] } ?? [])
        } else if let ids = send.installationIds {
            var seen = Set<String>()
            candidates = .init(ids.filter { seen.insert($0).inserted }.compactMap { index.installation(scope.key($0)) })
        } else if let user = send.userId {
            candidates = .init(index.installations(ofUser: scope.key(user)))
        } else {
            candidates = index.everyone(in: scope)
        }

        var plans: [PlannedDelivery] = []
        // Installations of one app share their templates: each distinct body is rendered once per notification.
        var rendered: [String: String] = [:]
        var expiries: [String: Date?] = [:]
        // The template of the installation before, and its payload: consecutive installations of
        // one app have the same, and comparing a body is cheaper than hashing it twice.
        var last: (body: String, markup: Template.Markup, template: Template, payload: String?)?
        for position in candidates.indices where include?(candidates.key(at: position)) ?? true {
            let installation = candidates[position]
            guard (installation.expirationTime ?? .distantFuture) > now else { continue }
            let before = plans.count
            defer {
                // An agent away: its deliveries are counted for its shard, and made when it comes back.
                if let parks, plans.count > before, plans[before...].allSatisfy(\.isPlainAgentDelivery),
                    parks(candidates.key(at: position))
                {
                    parked[Shards.of(candidates.key(at: position)), default: 0] += plans.count - before
                    plans.removeSubrange(before...)
                }
            }
            // The installation's effective tags, and a template's own beside them, asked one at a time.
            func matches(adding extra: [String]?) -> Bool {
                expression?.matches { tag in
                    Tag.isEffective(tag, stored: installation.tags, installationId: scope.id(installation.installationId), userId: installation.userId)
                        || (extra?.contains(tag) ?? false)
                } ?? true
            }
            let platform = installation.platform.lowercased()
            switch send.format {
            case .native:
                // A native send is in one platform's format and goes to that platform's installations.
                guard platform == (send.platform ?? .linux).rawValue, matches(adding: nil) else { continue }
                plans.append(PlannedDelivery(
                    deliveryId: Self.deliveryId(notification.notificationId, installation.installationId, "native"),
                    installationId: installation.installationId, template: nil, payload: send.body ?? "",
                    expiresAt: notification.expiresAt, rich: send.rich, platform: platform))
                plans[plans.count - 1].pushChannel = installation.pushChannel
                plans[plans.count - 1].headers = send.headers
            case .template:
                let properties = send.properties ?? [:]
                for (name, registered) in (installation.templates ?? [:]).sorted(by: { $0.key < $1.key }) {
                    guard matches(adding: registered.tags) else { continue }
                    let markup = Template.markup(platform: platform, headers: registered.headers)
                    let template: Template
                    if let last, last.markup == markup, last.body == registered.body {
                        template = last.template
                    } else {
                        guard let compiled = compiled(registered.body, markup) else { continue }
                        template = compiled
                        last = (registered.body, markup, compiled, nil)
                    }
                    var expiresAt = notification.expiresAt
                    if let expiry = registered.expiry {
                        let date = expiries[expiry] ?? expiryDate(expiry, properties)
                        expiries[expiry] = date
                        if let date { expiresAt = min(expiresAt, date) }
                    }
                    guard expiresAt > now else { continue }
                    func renderedPayload() -> String {
                        if let payload = last?.payload { return payload }
                        let renderKey = markup == .json ? registered.body : "\(markup.rawValue):\(registered.body)"
                        let payload = rendered[renderKey] ?? template.render(properties)
                        rendered[renderKey] = payload
                        last?.payload = payload
                        return payload
                    }
                    plans.append(PlannedDelivery(
                        deliveryId: Self.deliveryId(notification.notificationId, installation.installationId, name),
                        installationId: installation.installationId, template: name,
                        payload: renderedPayload(), expiresAt: expiresAt, platform: platform))
                    plans[plans.count - 1].pushChannel = installation.pushChannel
                    if let headers = registered.headers, !headers.isEmpty {
                        plans[plans.count - 1].headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }) { first, _ in first }
                    }
                }
            }
        }
        return plans
    }

    /// A delivery's id: `notification/installation/template` (`native` for a native send). Written
    /// once into a string of its length: interpolation grew it piece by piece, some 2,000
    /// instructions for each of a broadcast's deliveries.
    static func deliveryId(_ notificationId: String, _ installationId: String, _ template: String) -> String {
        var parts = (notificationId, installationId, template)
        let count = parts.0.utf8.count + parts.1.utf8.count + parts.2.utf8.count + 2
        return String(unsafeUninitializedCapacity: count) { buffer in
            var at = 0
            func put(_ part: inout String) {
                part.withUTF8 { bytes in
                    guard let base = bytes.baseAddress, let into = buffer.baseAddress else { return }
                    (into + at).initialize(from: base, count: bytes.count)
                    at += bytes.count
                }
            }
            put(&parts.0)
            buffer[at] = UInt8(ascii: "/")
            at += 1
            put(&parts.1)
            buffer[at] = UInt8(ascii: "/")
            at += 1
            put(&parts.2)
            return at
        }
    }

    /// Why `send` can reach no one whatever the installations: its tag expression does not parse here.
    public static func unplannable(_ send: SendNotification) -> String? {
        guard let text = send.tagExpression else { return nil }
        do {
            _ = try TagExpression.parsed(text)
            return nil
        } catch {
            return "its tag expression '\(text.prefix(200))' does not parse here (\(error.message)), so it reaches no one"
        }
    }

    private func lowercased(_ properties: [String: String]) -> [String: String] {
        Dictionary(properties.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
    }

    /// A template's expiry for these properties: nil when it names no date, which leaves the
    /// notification's own. The registry checked the expression when the template was written.
    private func expiryDate(_ expiry: String, _ properties: [String: String]) -> Date? {
        do {
            return WireDate.parse(try TemplateExpression.compile(expiry).renderText(lowercased(properties)))
        } catch {
            return nil
        }
    }

    /// A template compiled once per body; nil for one that does not compile here (the registry
    /// checked it when it was written, so it is from a newer writer), which plans nothing for it.
    private mutating func compiled(_ body: String, _ markup: Template.Markup) -> Template? {
        let key = markup == .json ? body : "\(markup.rawValue):\(body)"
        if let template = templateCache[key] { return template }
        let template: Template
        do {
            template = try Template(body, markup: markup)
        } catch {
            return nil
        }
        if templateCache.count > 10_000 { templateCache.removeAll() }
        templateCache[key] = template
        return template
    }
}
