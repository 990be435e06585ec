import Foundation
import HubProtocol
import Tags
import Templates

/// One notification, rendered for one installation.
struct PlannedDelivery: Equatable {
    var deliveryId: String
    var installationId: String
    var template: String?
    var payload: String
    var expiresAt: Date
    var rich: RichReference? = nil
}

/// Turns an accepted notification into deliveries: resolves its targets from the index and, for a
/// template send, fills in every matching template of every target — one delivery per template,
/// as the source documents describe. Plain logic, no IO.
struct TargetResolver {
    private var templateCache: [String: Template] = [:]

    mutating func plan(_ notification: AcceptedNotification, index: InstallationIndex, now: Date) -> [PlannedDelivery] {
        let send = notification.send
        var expression: TagExpression?
        var candidates: [Installation]
        if let text = send.tagExpression {
            // The publish service checked it; a failure here means a newer sender, so nothing matches.
            guard let parsed = try? TagExpression.parse(text) else { return [] }
            expression = parsed
            candidates = index.candidates(for: parsed)
        } else if let id = send.installationId {
            candidates = index.installation(id).map { [$0] } ?? []
        } else if let user = send.userId {
            candidates = index.installations(ofUser: user)
        } else {
            candidates = index.all
        }
        candidates = candidates.filter { ($0.expirationTime ?? .distantFuture) > now }

        var plans: [PlannedDelivery] = []
        for installation in candidates {
            let tags = Tag.effectiveTags(
                stored: installation.tags, installationId: installation.installationId, userId: installation.userId)
            switch send.format {
            case .native:
                guard expression?.matches(tags) ?? true else { continue }
                plans.append(PlannedDelivery(
                    deliveryId: "\(notification.notificationId)/\(installation.installationId)/native",
                    installationId: installation.installationId, template: nil, payload: send.body ?? "",
                    expiresAt: notification.expiresAt, rich: send.rich))
            case .template:
                let properties = send.properties ?? [:]
                for (name, registered) in (installation.templates ?? [:]).sorted(by: { $0.key < $1.key }) {
                    let templateTags = tags.union(registered.tags ?? [])
                    guard expression?.matches(templateTags) ?? true else { continue }
                    guard let template = compiled(registered.body) else { continue }
                    var expiresAt = notification.expiresAt
                    if let expiry = registered.expiry, let compiled = try? TemplateExpression.compile(expiry),
                        let date = WireDate.parse(compiled.renderText(lowercased(properties)))
                    {
                        expiresAt = min(expiresAt, date)
                    }
                    guard expiresAt > now else { continue }
                    plans.append(PlannedDelivery(
                        deliveryId: "\(notification.notificationId)/\(installation.installationId)/\(name)",
                        installationId: installation.installationId, template: name,
                        payload: template.render(properties), expiresAt: expiresAt))
                }
            }
        }
        return plans
    }

    private func lowercased(_ properties: [String: String]) -> [String: String] {
        Dictionary(properties.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
    }

    private mutating func compiled(_ body: String) -> Template? {
        if let template = templateCache[body] { return template }
        guard let template = try? Template(body) else { return nil }
        if templateCache.count > 10_000 { templateCache.removeAll() }
        templateCache[body] = template
        return template
    }
}
