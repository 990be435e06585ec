import Foundation
import HubProtocol

/// Each hub's path to the platforms' push services: an APNs key is for one app, an FCM project for
/// one app, so every hub has credentials of its own. The default hub's are the configuration's and
/// those set over the bus (`push-credentials.json` and `vapid-key.pem` in the data folder, as
/// before hubs); every other hub's are only those set for it, kept in `hubs/<hub>/` of the data
/// folder, with a VAPID key of its own. A hub without them has no delivery path to those platforms.
/// One HTTP client carries every hub's requests. Lives on the dispatcher's loop, as `PushCenter` does.
public final class PushCenters: @unchecked Sendable {
    /// The default hub's.
    public let home: PushCenter
    /// Every other hub's that has credentials, by its qualifier (`HubScope.qualifier`).
    private var hubs: [String: PushCenter] = [:]
    private let client: PushHTTPClient
    /// The transport settings alone, for a hub's center: the configured credentials are the default hub's.
    private let transport: PushSettings
    private let dataDir: URL
    private let post: (@escaping @Sendable () -> Void) -> Void
    private let note: (String, [(String, String)]) -> Void
    /// Deliveries of a hub without credentials, reported at once.
    private var unreachable: [(PushMessage, PushResult)] = []

    public static let hubsFolder = "hubs"

    public init(
        settings: PushSettings, dataDir: String, post: @escaping (@escaping @Sendable () -> Void) -> Void,
        note: @escaping (String, [(String, String)]) -> Void = { _, _ in }
    ) throws(PushConfigurationError) {
        if let caFile = settings.caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw PushConfigurationError("push.caFile '\(caFile)' cannot be read")
        }
        client = PushHTTPClient(settings: PushCenter.clientSettings(settings))
        self.dataDir = URL(fileURLWithPath: dataDir)
        self.post = post
        self.note = note
        var transport = settings
        (transport.apple, transport.fcm, transport.browser, transport.wns, transport.adm, transport.baidu) = (nil, nil, nil, nil, nil, nil)
        self.transport = transport
        do {
            home = try PushCenter(settings: settings, dataDir: dataDir, post: post, note: note, client: client)
            for qualifier in Self.hubFolders(self.dataDir) { hubs[qualifier] = try center(qualifier) }
        } catch {
            client.stop()
            throw error
        }
    }

    /// The hubs with credentials of their own in the data folder, by qualifier.
    static func hubFolders(_ dataDir: URL) -> [String] {
        let folder = dataDir.appendingPathComponent(hubsFolder)
        // Absent until a hub other than the default has credentials set.
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        return names.filter { FileManager.default.fileExists(atPath: folder.appendingPathComponent($0).appendingPathComponent(PushCenter.savedFile).path) }
            .sorted()
    }

    private func folder(_ qualifier: String) -> URL {
        dataDir.appendingPathComponent(Self.hubsFolder).appendingPathComponent(qualifier)
    }

    private func center(_ qualifier: String) throws(PushConfigurationError) -> PushCenter {
        try PushCenter(settings: transport, dataDir: folder(qualifier).path, post: post, note: note, client: client)
    }

    /// The center of a hub by its qualifier (nil: the default hub); nil for a hub without credentials.
    public func center(of qualifier: String?) -> PushCenter? {
        guard let qualifier else { return home }
        return hubs[qualifier]
    }

    /// Checks and applies credentials set over the bus for a hub (nil: the default hub), and keeps them.
    public func set(_ request: PushCredentialsSetRequest, hub qualifier: String?) throws(PushConfigurationError) -> [PushServiceInfo] {
        if let center = center(of: qualifier) { return try center.set(request) }
        guard let qualifier else { return try home.set(request) }
        do {
            try FileManager.default.createDirectory(at: folder(qualifier), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw PushConfigurationError("cannot make \(folder(qualifier).path): \(error)")
        }
        let center = try center(qualifier)
        let services = try center.set(request)
        hubs[qualifier] = center
        return services
    }

    /// A hub's services, without their secrets.
    public func info(hub qualifier: String?) -> [PushServiceInfo] { center(of: qualifier)?.info() ?? [] }

    /// A hub's platforms with a delivery path.
    public func platforms(hub qualifier: String?) -> Set<Platform> { center(of: qualifier)?.platforms ?? [] }

    /// Every hub's platforms with a delivery path, by qualifier ("" for the default hub).
    public var platformsByHub: [String: Set<String>] {
        var all = ["": Set(home.platforms.map(\.rawValue))]
        for (qualifier, center) in hubs { all[qualifier] = Set(center.platforms.map(\.rawValue)) }
        return all
    }

    /// Takes a delivery, to the center of its installation's hub; one of a hub without credentials
    /// is reported failed at once.
    public func submit(_ message: PushMessage, now: Date = Date()) {
        let qualifier = HubScope.hub(ofKey: message.installationId).map(String.init)
        guard let center = center(of: qualifier) else {
            unreachable.append((message, .failed(
                outcome: "PnsUnavailable", reason: "hub '\(qualifier ?? "")' has no credentials for \(message.platform.rawValue)'s push service")))
            return
        }
        center.submit(message, now: now)
    }

    /// Forgets a deleted hub's push services and deletes its credentials and VAPID key; deliveries it
    /// holds are reported failed as its submissions would be. Returns whether it had any.
    @discardableResult
    public func remove(hub qualifier: String) -> Bool {
        guard let center = hubs.removeValue(forKey: qualifier) else { return false }
        for (message, _) in center.takeReports() { unreachable.append((message, .failed(outcome: "PnsUnavailable", reason: "its hub was deleted"))) }
        // A folder that will not go is left behind: no hub reads it again, since a hub made again under the name is a new generation.
        try? FileManager.default.removeItem(at: folder(qualifier))
        return true
    }

    public func tick(now: Date = Date()) {
        home.tick(now: now)
        for center in hubs.values { center.tick(now: now) }
    }

    public func takeReports() -> [(PushMessage, PushResult)] {
        var reports = unreachable + home.takeReports()
        unreachable = []
        for center in hubs.values { reports += center.takeReports() }
        return reports
    }

    public var pending: Int { hubs.values.reduce(home.pending) { $0 + $1.pending } }
    public var inFlight: Int { client.inFlight }
    public var stalls: Int { client.stalls }

    /// Each service's counts, summed over the hubs.
    public var counters: [PushService: PushCounters] {
        var all = home.counters
        for center in hubs.values {
            for (service, counts) in center.counters { all[service] = all[service].map { $0.adding(counts) } ?? counts }
        }
        return all
    }

    public func stop() { client.stop() }
}

extension PushCounters {
    func adding(_ other: PushCounters) -> PushCounters {
        var sum = self
        sum.sent += other.sent
        sum.delivered += other.delivered
        sum.retried += other.retried
        sum.expiredChannels += other.expiredChannels
        sum.failed += other.failed
        sum.tokenRequests += other.tokenRequests
        sum.errors.merge(other.errors, uniquingKeysWith: +)
        sum.answers.merge(other.answers, uniquingKeysWith: +)
        return sum
    }
}
