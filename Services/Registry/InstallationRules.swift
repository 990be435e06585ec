import Bus
import Foundation
import Synchronization
import HubProtocol
import Tags
import Templates

/// What makes an installation acceptable. Plain logic: an installation in, the checked one or a
/// `HubError` out.
enum InstallationRules {
    static let maxTemplates = 20
    /// Template bodies that compiled, with their markup, a thousand at most.
    private static let compiled = Mutex<Set<String>>([])
    static let maxIdLength = 200

    static func validate(
        _ installation: Installation, now: Date, maxTags: Int = Tag.maxPerInstallation, wnsChannelDomain: String = "notify.windows.com"
    ) throws(HubError) {
        try validateIdentifier(installation.installationId, what: "installationId")
        guard Platform(name: installation.platform) != nil else {
            throw HubError(
                .invalidArgument,
                "platform '\(installation.platform)' is not one of \(Platform.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard !installation.pushChannel.isEmpty, installation.pushChannel.utf8.count <= 1024 else {
            throw HubError(.invalidArgument, "pushChannel must be 1 to 1024 characters: the handle the hub delivers to")
        }
        try validateChannel(installation, wnsChannelDomain: wnsChannelDomain)
        do {
            try Tag.validate(all: installation.tags, limit: maxTags)
        } catch {
            throw HubError(.invalidTag, error.message)
        }
        if let userId = installation.userId {
            do {
                try Tag.validate(userId)
            } catch {
                throw HubError(.invalidArgument, "userId: \(error.message.replacingOccurrences(of: "tag", with: "user id"))")
            }
        }
        if let expiration = installation.expirationTime, expiration <= now {
            throw HubError(.invalidArgument, "expirationTime \(WireDate.format(expiration)) is in the past")
        }
        let templates = installation.templates ?? [:]
        guard templates.count <= maxTemplates else {
            throw HubError(.invalidTemplate, "an installation has at most \(maxTemplates) templates; this one has \(templates.count)")
        }
        for (name, template) in templates.sorted(by: { $0.key < $1.key }) {
            try validateTemplate(name: name, template, maxTags: maxTags, platform: installation.platform)
        }
        try validateEndpoints(installation)
    }

    /// A WNS channel the hub posts to is one Windows handed out, never an address a client chose:
    /// an https URL on a host under the channel domain (`push.wnsChannelDomain`).
    static func validateChannel(_ installation: Installation, wnsChannelDomain: String) throws(HubError) {
        guard Platform(name: installation.platform) == .wns else { return }
        let channel = installation.pushChannel
        guard !Platform.isWNSChannel(channel, domain: wnsChannelDomain) else { return }
        let domain = wnsChannelDomain.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "."))
        throw HubError(
            .invalidArgument, "a wns pushChannel is the channel URI Windows handed the app: https://<host>.\(domain)/…, not '\(channel.prefix(100))'")
    }

    static let maxEndpoints = 100

    /// Push endpoints belong to agents (linux installations), at most 100; each id is a SHA-256 in
    /// base64url (43 characters), and a VAPID key an uncompressed P-256 point in base64url (87, from 0x04).
    static func validateEndpoints(_ installation: Installation) throws(HubError) {
        guard let endpoints = installation.endpoints, !endpoints.isEmpty else { return }
        guard installation.platform == Platform.linux.rawValue else {
            throw HubError(.invalidArgument, "endpoints are an agent's apps' push endpoints: a linux installation's, not \(installation.platform)'s")
        }
        guard endpoints.count <= maxEndpoints else {
            throw HubError(.invalidArgument, "an installation has at most \(maxEndpoints) push endpoints; this one has \(endpoints.count)")
        }
        func isBase64URL(_ text: String, count: Int) -> Bool {
            text.utf8.count == count && text.utf8.allSatisfy { ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F }
        }
        for (id, endpoint) in endpoints.sorted(by: { $0.key < $1.key }) {
            guard isBase64URL(id, count: 43) else {
                throw HubError(.invalidArgument, "endpoint id '\(id.prefix(50))' is not a SHA-256 in base64url (43 characters)")
            }
            if let vapid = endpoint.vapid, !(isBase64URL(vapid, count: 87) && vapid.hasPrefix("B")) {
                throw HubError(.invalidArgument, "endpoint '\(id)': vapid must be an uncompressed P-256 public key in base64url (87 characters)")
            }
        }
    }

    /// A `linux` installation is a hub agent, and its push channel is the agent's CURVE public key:
    /// the dispatcher delivers only to a connection proven to hold that key. Once bound, the key
    /// changes only with a Manage key, for a device that lost its own; otherwise anyone with the
    /// listen key could move another device's deliveries to a key of theirs. A push channel that is
    /// not a key (from before keys were bound) may be replaced by one.
    /// Moving a bound agent's installation to another platform is a rebind too: it would otherwise
    /// clear the binding for a second write to bind another key.
    static func checkBinding(_ installation: Installation, current: Installation?, mayRebind: Bool) throws(HubError) {
        guard let current, current.platform == "linux", CurveKeyPair.isValidKey(current.pushChannel), !mayRebind,
            current.pushChannel != installation.pushChannel || installation.platform != "linux"
        else { return }
        throw HubError(
            .forbidden,
            "installation '\(installation.installationId)' is bound to another device key; only the agent holding that key may register it, or a Manage key may rebind it")
    }

    /// An installation with a `userId` receives that user's sends and signals, so setting or
    /// changing it needs proof of the user: a user token of that user (`tokenUser` verifies the
    /// request's token and names its user), or a Manage key. Keeping the user, or removing it, needs none.
    static func checkUser(_ installation: Installation, current: Installation?, mayClaim: Bool, tokenUser: () throws(HubError) -> String) throws(HubError) {
        guard let user = installation.userId, user != current?.userId, !mayClaim else { return }
        let proven: String
        do {
            proven = try tokenUser()
        } catch {
            throw HubError(
                .forbidden,
                "setting userId '\(user)' needs a user token of '\(user)' (userToken, which an agent gets after login) or a Manage key: \(error.message)")
        }
        guard proven == user else {
            throw HubError(.forbidden, "the user token is for '\(proven)', not '\(user)'; an installation may claim only its own user")
        }
    }

    static func validateIdentifier(_ id: String, what: String) throws(HubError) {
        guard !id.isEmpty, id.utf8.count <= maxIdLength else {
            throw HubError(.invalidArgument, "\(what) must be 1 to \(maxIdLength) characters")
        }
        guard id.utf8.allSatisfy({ Tag.isTagCharacter($0) }) else {
            throw HubError(.invalidArgument, "\(what) '\(id)' may use only A–Z a–z 0–9 _ @ # . : -")
        }
    }

    static func validateTemplate(
        name: String, _ template: InstallationTemplate, maxTags: Int = Tag.maxPerInstallation, platform: String = "linux"
    ) throws(HubError) {
        guard !name.isEmpty, name.count <= 64, name.utf8.allSatisfy({ Tag.isTagCharacter($0) }) else {
            throw HubError(.invalidTemplate, "template name '\(name)' must be 1 to 64 characters of A–Z a–z 0–9 _ @ # . : -")
        }
        do {
            try Platform.checkHeaders(template.headers ?? [:], what: "template '\(name)' header")
        } catch {
            throw HubError(.invalidTemplate, error.message)
        }
        let markup = Template.markup(platform: platform, headers: template.headers)
        // Installations of one app share their templates: a body that compiled is not compiled again.
        let key = "\(markup.rawValue)\u{0}\(template.body)"
        if !compiled.withLock({ $0.contains(key) }) {
            do {
                _ = try Template(template.body, markup: markup)
            } catch {
                throw HubError(.invalidTemplate, "template '\(name)': \(error.message)")
            }
            compiled.withLock {
                if $0.count >= 1_000 { $0.removeAll() }
                $0.insert(key)
            }
        }
        if let expiry = template.expiry {
            do {
                _ = try TemplateExpression.compile(expiry)
            } catch {
                throw HubError(.invalidTemplate, "template '\(name)' expiry: \(error.message)")
            }
        }
        do {
            try Tag.validate(all: template.tags ?? [], limit: maxTags)
        } catch {
            throw HubError(.invalidTag, "template '\(name)': \(error.message)")
        }
    }
}
