import Auth
import Foundation
import HubProtocol

/// The dispatcher's path to the platforms' push services. It takes deliveries, makes each push
/// service's request, and reads its answer: a delivery that was taken, or cannot be, is reported
/// once; one that may go later (throttled, a server error, no answer) is sent again, after the
/// service's Retry-After when it gave one and with a growing delay when not, until it expires.
///
/// It lives on one thread, the dispatcher's loop: answers come back through `post`, which runs
/// them there. Deliveries stay in the dispatcher's store until they are reported, so a restart
/// hands them in again and nothing is lost.
public final class PushCenter: @unchecked Sendable {
    /// Deliveries reported done (delivered, their channel expired, or failed for good), in order,
    /// until the owner takes them (`takeReports`).
    private var reports: [(PushMessage, PushResult)] = []
    /// Something worth a log line.
    private let note: (String, [(String, String)]) -> Void

    /// Each service's counts of requests and answers.
    public var counters: [PushService: PushCounters] { queue.counters }
    private let client: PushHTTPClient
    private let post: (@escaping @Sendable () -> Void) -> Void
    private let dataDir: URL
    private let configured: PushSettings
    private var senders: [PushService: any PushSender] = [:]
    private var sources: [PushService: String] = [:]
    /// The decisions: what goes out, waits or is reported, from answers and ticks.
    private var queue = PushQueue()
    /// Set over the bus: replaces the configuration file's settings of the same service.
    static let savedFile = "push-credentials.json"
    static let vapidFile = "vapid-key.pem"

    /// Loads every push service's credentials: the configuration's, then those set over the bus.
    /// A service whose credentials do not load is refused here, with what to fix.
    /// Answers come back through `post`, which runs them on the owner's loop; after `submit`,
    /// `tick` and each batch posted, `takeReports` has what they decided.
    /// With `client`, requests go through that HTTP client, which its owner stops; without, through
    /// one of this center's own.
    public init(
        settings: PushSettings, dataDir: String, post: @escaping (@escaping @Sendable () -> Void) -> Void,
        note: @escaping (String, [(String, String)]) -> Void = { _, _ in }, client shared: PushHTTPClient? = nil
    ) throws(PushConfigurationError) {
        if let caFile = settings.caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw PushConfigurationError("push.caFile '\(caFile)' cannot be read")
        }
        self.dataDir = URL(fileURLWithPath: dataDir)
        self.configured = settings
        self.post = post
        self.note = note
        ownsClient = shared == nil
        client = shared ?? PushHTTPClient(settings: Self.clientSettings(settings))
        do {
            try apply(configured: settings, saved: try Self.loadSaved(self.dataDir.appendingPathComponent(Self.savedFile)))
        } catch {
            if ownsClient { client.stop() }
            throw error
        }
    }

    /// Whether `stop` stops the HTTP client: one given at init is its owner's to stop.
    private let ownsClient: Bool

    public func stop() { if ownsClient { client.stop() } }

    /// The HTTP client's settings from the push settings.
    static func clientSettings(_ settings: PushSettings) -> PushHTTPClient.Settings {
        var clientSettings = PushHTTPClient.Settings()
        clientSettings.maxConnectionsPerHost = settings.connectionsPerHost
        clientSettings.streamsPerConnection = settings.streamsPerConnection
        clientSettings.maxInFlight = settings.maxInFlight
        clientSettings.timeoutMs = settings.timeoutMs
        clientSettings.stallMs = settings.stallMs
        clientSettings.caFile = settings.caFile
        return clientSettings
    }

    /// The platforms with a delivery path now.
    public var platforms: Set<Platform> { Set(senders.keys.map(\.platform)) }

    /// Deliveries taken and not yet reported.
    public var pending: Int { queue.pending }

    public var inFlight: Int { client.inFlight }
    /// How often push services' connections were shut down as stuck.
    public var stalls: Int { client.stalls }

    // MARK: Credentials

    /// Everything the start checks, with nothing started and nothing written: the CA file, and every
    /// push service's credentials (the configuration's, then those set over the bus), each loaded
    /// as a start loads it. A VAPID key the data folder does not have yet counts as one to be made.
    public static func check(settings: PushSettings, dataDir: String) throws(PushConfigurationError) {
        if let caFile = settings.caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw PushConfigurationError("push.caFile '\(caFile)' cannot be read")
        }
        let folder = URL(fileURLWithPath: dataDir)
        _ = try senders(configured: settings, saved: try loadSaved(folder.appendingPathComponent(savedFile)), dataDir: folder, create: false)
    }

    private func apply(configured: PushSettings, saved: PushSettings) throws(PushConfigurationError) {
        (senders, sources) = try Self.senders(configured: configured, saved: saved, dataDir: dataDir, create: true)
    }

    /// A sender for each push service with credentials, and where they came from.
    private static func senders(
        configured: PushSettings, saved: PushSettings, dataDir: URL, create: Bool
    ) throws(PushConfigurationError) -> ([PushService: any PushSender], [PushService: String]) {
        var senders: [PushService: any PushSender] = [:]
        var sources: [PushService: String] = [:]
        /// The service's sender from the credentials set over the bus, else the configured ones.
        func add<Settings>(
            _ service: PushService, _ path: KeyPath<PushSettings, Settings?>,
            _ make: (Settings) throws(PushConfigurationError) -> any PushSender
        ) throws(PushConfigurationError) {
            guard let settings = saved[keyPath: path] ?? configured[keyPath: path] else { return }
            senders[service] = try make(settings)
            sources[service] = saved[keyPath: path] == nil ? "config" : "set"
        }
        let read = Self.readFile
        try add(.apple, \.apple) { settings throws(PushConfigurationError) in try AppleSender(settings, readFile: read) }
        try add(.fcm, \.fcm) { settings throws(PushConfigurationError) in try FCMSender(settings, readFile: read) }
        try add(.browser, \.browser) { settings throws(PushConfigurationError) in
            try WebPushSender(settings, key: try vapidKey(settings, dataDir: dataDir, create: create) ?? P256Key.generate())
        }
        try add(.wns, \.wns) { settings throws(PushConfigurationError) in try WNSSender(settings, channelDomain: configured.wnsChannelDomain) }
        try add(.adm, \.adm) { settings throws(PushConfigurationError) in try ADMSender(settings) }
        try add(.baidu, \.baidu) { settings throws(PushConfigurationError) in try BaiduSender(settings) }
        return (senders, sources)
    }

    /// The hub's VAPID key: the configured file, or one made once in the data folder and kept there
    /// (nil when it is not there yet and `create` is false).
    private static func vapidKey(_ settings: WebPushSettings, dataDir: URL, create: Bool) throws(PushConfigurationError) -> P256Key? {
        do {
            let pem: Data
            if let file = settings.keyFile {
                pem = Data(try Self.readFile(file).utf8)
            } else {
                let kept = dataDir.appendingPathComponent(Self.vapidFile)
                if !create && !FileManager.default.fileExists(atPath: kept.path) { return nil }
                pem = try SecretFile.loadOrCreate(kept) { Data(P256Key.generate().privateKeyPEM.utf8) }
            }
            return try P256Key(pem: String(decoding: pem, as: UTF8.self))
        } catch let error as PushConfigurationError {
            throw error
        } catch {
            throw PushConfigurationError("push.browser: the VAPID key \(settings.keyFile ?? Self.vapidFile) does not load: \(error)")
        }
    }

    static func readFile(_ path: String) throws(PushConfigurationError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PushConfigurationError("cannot read '\(path)': \(FileManager.default.fileExists(atPath: path) ? "check its mode and owner" : "no such file")")
        }
        return String(decoding: data, as: UTF8.self)
    }

    static func loadSaved(_ url: URL) throws(PushConfigurationError) -> PushSettings {
        guard let data = FileManager.default.contents(atPath: url.path) else { return PushSettings() }
        do {
            return try JSONDecoder().decode(PushSettings.self, from: data)
        } catch {
            throw PushConfigurationError("\(url.path) is not valid push credentials: \(error); remove it and set them again")
        }
    }

    /// Checks and applies credentials set over the bus, and keeps them (mode 0600) for the next start.
    public func set(_ request: PushCredentialsSetRequest) throws(PushConfigurationError) -> [PushServiceInfo] {
        let url = dataDir.appendingPathComponent(Self.savedFile)
        var saved = try Self.loadSaved(url)
        let saved0 = saved
        for name in request.remove ?? [] {
            switch PushService(rawValue: name) {
            case .apple: saved.apple = nil
            case .fcm: saved.fcm = nil
            case .browser: saved.browser = nil
            case .wns: saved.wns = nil
            case .adm: saved.adm = nil
            case .baidu: saved.baidu = nil
            case nil: throw PushConfigurationError("'\(name)' is not a push service; remove \(PushServiceName.all.joined(separator: ", "))")
            }
        }
        if let apple = request.apple {
            guard apple.key != nil else { throw PushConfigurationError("apple credentials set over the bus carry the .p8 key's text in 'key'") }
            saved.apple = apple
            saved.apple?.keyFile = nil
            // Credentials without an endpoint keep the one in force (set before, or configured).
            saved.apple?.givenEndpoint = apple.givenEndpoint ?? (saved0.apple ?? configured.apple)?.givenEndpoint
        }
        if let fcm = request.fcm {
            guard fcm.serviceAccount != nil else {
                throw PushConfigurationError("fcm credentials set over the bus carry the service account's JSON text in 'serviceAccount'")
            }
            saved.fcm = fcm
            saved.fcm?.serviceAccountFile = nil
            saved.fcm?.givenEndpoint = fcm.givenEndpoint ?? (saved0.fcm ?? configured.fcm)?.givenEndpoint
        }
        if let browser = request.browser { saved.browser = browser }
        // Endpoints left out keep the ones in force, as for APNs and FCM.
        if var wns = request.wns {
            // Only for the same form of credentials (and tenant): a Package SID's token comes from
            // the Microsoft account service, an Entra application's from its tenant.
            if wns.tokenEndpoint == nil, let previous = saved0.wns ?? configured.wns,
                (previous.packageSid == nil) == (wns.packageSid == nil), previous.tenantId == wns.tenantId
            {
                wns.tokenEndpoint = previous.tokenEndpoint
            }
            saved.wns = wns
        }
        if var adm = request.adm {
            let previous = saved0.adm ?? configured.adm
            adm.endpoint = adm.endpoint ?? previous?.endpoint
            adm.tokenEndpoint = adm.tokenEndpoint ?? previous?.tokenEndpoint
            saved.adm = adm
        }
        if var baidu = request.baidu {
            baidu.endpoint = baidu.endpoint ?? (saved0.baidu ?? configured.baidu)?.endpoint
            saved.baidu = baidu
        }
        let previous = (senders, sources)
        try apply(configured: configured, saved: saved)
        do {
            let data = try JSONEncoder().encode(saved)
            let temporary = url.deletingLastPathComponent().appendingPathComponent(".\(Self.savedFile)-\(getpid())")
            guard FileManager.default.createFile(atPath: temporary.path, contents: data, attributes: [.posixPermissions: 0o600]) else {
                throw PushConfigurationError("cannot write \(temporary.path)")
            }
            guard rename(temporary.path, url.path) == 0 else {
                throw PushConfigurationError("cannot write \(url.path): \(String(cString: strerror(errno)))")
            }
        } catch {
            (senders, sources) = previous
            throw error as? PushConfigurationError ?? PushConfigurationError("cannot keep the push credentials: \(error)")
        }
        return info()
    }

    /// Every configured service, without its secrets.
    public func info() -> [PushServiceInfo] {
        PushService.allCases.compactMap { service in senders[service]?.info(source: sources[service] ?? "config") }
    }

    // MARK: Deliveries

    /// The deliveries reported done since the last call, in the order they were.
    public func takeReports() -> [(PushMessage, PushResult)] {
        defer { reports = [] }
        return reports
    }

    /// Takes a delivery; one already taken is not taken twice.
    public func submit(_ message: PushMessage, now: Date = Date()) {
        carryOut(queue.submit(message, now: now, gates: self), now: now)
    }

    /// Sends again what is due.
    public func tick(now: Date = Date()) {
        carryOut(queue.tick(now: now, gates: self), now: now)
    }

    private func carryOut(_ steps: [PushStep], now: Date) {
        for step in steps {
            switch step {
            case .send(let message, let service):
                guard let sender = senders[service] else { continue }
                let id = message.deliveryId
                do {
                    let request = try sender.request(for: message, now: now)
                    try request.checkHeaders()
                    client.send(request) { response in self.post { self.answered(id, service, response) } }
                } catch {
                    carryOut(queue.unsendable(id, error), now: now)
                }
            case .fetchToken(let service, let request):
                client.send(request) { response in self.post { self.tokenAnswered(service, response) } }
            case .report(let message, let result):
                reports.append((message, result))
            case .note(let message, let fields):
                note(message, fields)
            }
        }
    }

    private func tokenAnswered(_ service: PushService, _ response: PushHTTPResponse) {
        let now = Date()
        let problem = senders[service]?.tokenAnswered(response, now: now)
        carryOut(queue.tokenAnswered(service, problem: problem, retryAfter: response.retryAfter(now: now), now: now, gates: self), now: now)
    }

    private func answered(_ id: String, _ service: PushService, _ response: PushHTTPResponse) {
        let now = Date()
        if let said = senders[service]?.said(response), !said.isEmpty { queue.noted(service, said) }
        let result = senders[service].map { sender in
            response.requestError.map { PushResult.failed(outcome: $0.outcome, reason: $0.reason) } ?? sender.classify(response, now: now)
        }
        carryOut(queue.answered(id, result, now: now, gates: self), now: now)
    }
}

extension PushCenter: PushGates {
    func authorization(_ service: PushService, now: Date) -> PushAuthorization? { senders[service]?.authorization(now: now) }
    func renew(_ service: PushService, now: Date) { senders[service]?.renew(now: now) }
}
