import Auth
import Foundation
import HubProtocol
import Push
import ServiceKit
import Synchronization

/// Deliveries to phones, browsers and Windows devices through the real services and the stand-in
/// push services (Tests/Support/pushstandins.py, run as a child process): a template broadcast to
/// N APNs devices, one to N Web Push subscriptions and one to N WNS channels, each timed from the
/// send until the dispatcher counts all N delivered; beside each, the curl command (the same
/// libcurl) sending the same N requests to the same stand-in: over one multiplexed HTTP/2
/// connection, or, to WNS, which speaks HTTP/1.1, over as many connections as the dispatcher may
/// open to a host. The stand-ins check every token and signature and decrypt every Web Push body,
/// in Python: both sides wait on them alike.
enum PushBench {
    /// Broadcasts (and curl runs) per figure; the median one counts.
    static let rounds = 3
    /// Requests curl keeps in flight: libcurl's default stream limit per connection, so one connection carries them all.
    static let curlStreams = 100
    static let subject = "mailto:bench@example.com"
    /// The template parameter every broadcast sends, and so every request's text.
    static let message = "Breaking news from the push bench"
    static let appleBody = #"{"aps":{"alert":"\#(message)"}}"#
    static let toast = #"<toast><visual><binding template="ToastGeneric"><text>$(msg)</text></binding></visual></toast>"#
    /// Connections the dispatcher opens to one host (push.connectionsPerHost's default); curl gets as many to WNS.
    static let wnsConnections = PushSettings().connectionsPerHost

    static func run(devices: Int, standIns script: String? = nil) throws -> [BenchResult] {
        let standIns = try StandInProcess.start(script: try RepositoryFile.locate("Tests/Support/pushstandins.py", given: script, option: "--standins"))
        defer { standIns.stop() }
        let config = standIns.config
        let control = StandInClient(caFile: config.caFile)
        defer { control.stop() }
        let subscriptions = try control.subscribe(devices, at: config.webpush.subscribe)

        let cluster = try HubCluster()
        defer { cluster.stopAll() }
        var settings = PushSettings(
            apple: AppleSettings(
                keyFile: config.apple.keyFile, keyId: config.apple.keyId, teamId: config.apple.teamId, bundleId: config.apple.bundleId,
                endpoint: config.apple.endpoint),
            browser: WebPushSettings(subject: subject), caFile: config.caFile)
        settings.wns = WNSSettings(tenantId: config.wns.tenantId, clientId: config.wns.clientId, secret: config.wns.secret, tokenEndpoint: config.wns.entraTokenEndpoint)
        settings.wnsChannelDomain = config.wns.channelDomain
        let channels = (0..<devices).map { "\(config.wns.origin)/w/?token=bench\($0)" }
        let configFile = cluster.dataDirectory.appendingPathComponent("push-bench.json")
        try JSONEncoder().encode(["push": settings]).write(to: configFile)
        cluster.environment["NH_CONFIG"] = configFile.path
        try cluster.startServices()

        let tokens = (0..<devices).map { Crypto.sha256(Data("push bench device \($0)".utf8)).hexString }
        let credential = try cluster.credential()
        let busToken = credential.token(for: "http://127.0.0.1:7780/hub")
        let registry = try HubForwarder(connect: cluster.environment["NH_REGISTRY_REQUESTS"]!, timeoutMs: 30_000, curve: cluster.bus?.client) { busToken }
        defer { registry.close() }
        try BulkRegistration.upsert(
            tokens.enumerated().map { index, token in
                Installation(
                    installationId: "pushbench-\(index)", platform: "apns", pushChannel: token, tags: ["pushbench"],
                    templates: ["alert": InstallationTemplate(body: #"{"aps":{"alert":"$(msg)"}}"#)])
            }
                + subscriptions.enumerated().map { index, subscription in
                    Installation(
                        installationId: "webbench-\(index)", platform: "browser", pushChannel: subscription.channel, tags: ["webbench"],
                        templates: ["title": InstallationTemplate(body: #"{"title":"$(msg)"}"#)])
                }
                + channels.enumerated().map { index, channel in
                    Installation(
                        installationId: "wnsbench-\(index)", platform: "wns", pushChannel: channel, tags: ["wnsbench"],
                        templates: ["toast": InstallationTemplate(body: toast, headers: ["X-WNS-Type": "wns/toast"])])
                }, registry: registry)
        let dispatcher = try cluster.client("NH_DISPATCH_REQUESTS")
        let publish = try cluster.client("NH_PUBLISH_REQUESTS")
        guard FanoutBench.waitFor(timeout: 120, { (try? dispatcher.call(HealthRequest()).details?["installations"]) == String(3 * devices) }) else {
            throw BenchError("the dispatcher did not index the \(3 * devices) push installations within 120 s")
        }

        let folder = standIns.folder
        let curl = RepositoryFile.executable(named: "curl")
        let timeToLive = HubConfig().defaultTimeToLive
        let n = devices.formatted()

        // APNs: the provider token made once, as the hub makes it once for 50 minutes.
        let appleKey = try P256Key(pem: try String(contentsOfFile: config.apple.keyFile, encoding: .utf8))
        let jwt = try JWT.es256(
            header: ["kid": config.apple.keyId],
            claims: ["iss": .string(config.apple.teamId), "iat": .number(Double(Int(Date().timeIntervalSince1970)))], key: appleKey)
        let expiration = String(Int(Date().timeIntervalSince1970) + timeToLive)
        let appleConfig = folder.appendingPathComponent("apns.curl")
        try CurlConfig.text(tokens.map { token in
            CurlConfig.request(
                url: "\(config.apple.endpoint)/3/device/\(token)",
                headers: [
                    ("authorization", "bearer \(jwt)"), ("apns-topic", config.apple.bundleId), ("apns-push-type", "alert"),
                    ("apns-priority", "10"), ("apns-expiration", expiration), ("apns-id", UUID().uuidString),
                    ("content-type", "application/json"),
                ],
                body: .raw(appleBody), caFile: config.caFile)
        }).write(to: appleConfig, atomically: true, encoding: .utf8)
        let apple = try compare(
            stats: { try control.stats(config.apple.endpoint) }, dispatcher: dispatcher,
            hub: { try broadcast(tag: "pushbench", counter: "pushApns", message: message, devices: devices, publish: publish, dispatcher: dispatcher) },
            reference: curl.map { curl in { try runCurl(curl, config: appleConfig, requests: devices) } })

        // Web Push: every body encrypted for its subscription beforehand, one VAPID header for the origin.
        let encryptStart = ContinuousClock.now
        let plaintext = Data(#"{"title":"\#(message)"}"#.utf8)
        let encrypted = try subscriptions.map { try WebPushEncryption.encrypt(plaintext, p256dh: $0.p256dh, auth: $0.auth) }
        let encryptSeconds = seconds(since: encryptStart)
        let vapid = try VAPID.authorization(origin: config.webpush.origin, subject: subject, key: P256Key.generate())
        let bodies = folder.appendingPathComponent("webpush-bodies")
        try FileManager.default.createDirectory(at: bodies, withIntermediateDirectories: true)
        let webConfig = folder.appendingPathComponent("webpush.curl")
        try CurlConfig.text(zip(subscriptions, encrypted).enumerated().map { index, pair in
            let body = bodies.appendingPathComponent("\(index)")
            try pair.1.write(to: body)
            return CurlConfig.request(
                url: pair.0.endpoint,
                headers: [
                    ("authorization", vapid), ("content-encoding", "aes128gcm"), ("content-type", "application/octet-stream"),
                    ("ttl", String(timeToLive)),
                ],
                body: .file(body.path), caFile: config.caFile)
        }).write(to: webConfig, atomically: true, encoding: .utf8)
        let web = try compare(
            stats: { try control.stats(config.webpush.origin) }, dispatcher: dispatcher,
            hub: { try broadcast(tag: "webbench", counter: "pushBrowser", message: message, devices: devices, publish: publish, dispatcher: dispatcher) },
            reference: curl.map { curl in { try runCurl(curl, config: webConfig, requests: devices) } })

        // WNS: a token from Entra, as the hub fetches one and keeps it; the toast rendered as the hub renders it.
        let token = try control.token(
            at: config.wns.entraTokenEndpoint,
            form: [("grant_type", "client_credentials"), ("client_id", config.wns.clientId), ("client_secret", config.wns.secret),
                   ("scope", "https://wns.windows.com/.default")])
        let wnsConfig = folder.appendingPathComponent("wns.curl")
        let rendered = toast.replacingOccurrences(of: "$(msg)", with: message)
        try CurlConfig.text(channels.map { channel in
            CurlConfig.request(
                url: channel,
                headers: [
                    ("authorization", "Bearer \(token)"), ("x-wns-type", "wns/toast"), ("content-type", "text/xml"), ("x-wns-ttl", String(timeToLive)),
                ],
                body: .raw(rendered), caFile: config.caFile, http2: false)
        }).write(to: wnsConfig, atomically: true, encoding: .utf8)
        let wns = try compare(
            stats: { try control.stats(config.wns.origin) }, dispatcher: dispatcher,
            hub: { try broadcast(tag: "wnsbench", counter: "pushWns", message: message, devices: devices, publish: publish, dispatcher: dispatcher) },
            reference: curl.map { curl in { try runCurl(curl, config: wnsConfig, requests: devices, parallel: wnsConnections) } })

        let appleReference = "APNs N=\(n): curl, 1 h2 connection"
        let webReference = "Web Push N=\(n): curl, 1 h2 connection"
        let wnsReference = "WNS N=\(n): curl, \(wnsConnections) HTTP/1.1 connections"
        let noCurl = "no curl command on this machine"
        return [
            apple.hub.result(
                name: "APNs N=\(n): hub broadcast delivered", devices: devices, baseline: appleReference,
                note: "from the send until the dispatcher has counted all \(n) taken"),
            apple.reference?.result(name: appleReference, devices: devices, note: "the same \(n) requests and headers, one JWT")
                ?? BenchResult(name: appleReference, unit: "push/s", count: 0, seconds: 0, note: noCurl),
            web.hub.result(
                name: "Web Push N=\(n): hub broadcast delivered", devices: devices, baseline: webReference,
                note: "includes planning and encrypting each of the \(n)"),
            web.reference?.result(
                name: webReference, devices: devices,
                note: "bodies encrypted beforehand (\(String(format: "%.2f", encryptSeconds)) s, not counted)")
                ?? BenchResult(name: webReference, unit: "push/s", count: 0, seconds: 0, note: noCurl),
            wns.hub.result(
                name: "WNS N=\(n): hub broadcast delivered", devices: devices, baseline: wnsReference,
                note: "toasts rendered from the template, escaped as XML; WNS speaks HTTP/1.1, one request a connection at a time"),
            wns.reference?.result(name: wnsReference, devices: devices, note: "the same \(n) requests and headers, one token")
                ?? BenchResult(name: wnsReference, unit: "push/s", count: 0, seconds: 0, note: noCurl),
        ]
    }

    /// One round's time, or what went wrong.
    typealias Round = Result<Double, BenchError>

    /// `rounds` rounds of the hub's way and the reference's, alternately, so that neither runs on a
    /// machine the other has just warmed or left busy; each once the dispatcher has nothing more in
    /// flight. What the stand-in counted is kept for each way.
    static func compare(
        stats: () throws -> StandInStats, dispatcher: HubClient, hub: () throws -> Round, reference: (() throws -> (Round, CurlLines))?
    ) throws -> (hub: Measured, reference: Measured?) {
        var measured = Measured()
        var referenceMeasured = reference.map { _ in Measured() }
        for round in 1...rounds {
            settle(dispatcher)
            var before = try stats()
            let result = try hub()
            settle(dispatcher)
            var after = try stats()
            measured.add(result, round: round, standIn: after.minus(before))
            guard let reference else { continue }
            before = after
            let (referenceResult, lines) = try reference()
            after = try stats()
            referenceMeasured?.add(referenceResult, round: round, standIn: after.minus(before), curl: lines)
        }
        return (measured, referenceMeasured)
    }

    /// Waits until the dispatcher has no push delivery pending or in flight, then a little more
    /// for its store's writes (at most 30 s).
    static func settle(_ dispatcher: HubClient) {
        _ = FanoutBench.waitFor(timeout: 30) {
            let details = (try? dispatcher.call(HealthRequest()).details) ?? [:]
            return details["pushPending"] == "0" && details["pushInFlight"] == "0"
        }
        Thread.sleep(forTimeInterval: 0.3)
    }

    /// A template broadcast to `tag`, timed from the send until the dispatcher's
    /// `<counter>DeliveredTotal` has grown by `devices` (health asked every 20 ms).
    static func broadcast(tag: String, counter: String, message: String, devices: Int, publish: HubClient, dispatcher: HubClient) throws -> Round {
        func total(_ details: [String: String], _ name: String) -> Int { Int(details[counter + name] ?? "") ?? 0 }
        let before = try dispatcher.call(HealthRequest()).details ?? [:]
        let start = ContinuousClock.now
        _ = try publish.call(SendNotification(format: .template, properties: ["msg": message], tagExpression: tag))
        let deadline = start + .seconds(60)
        while ContinuousClock.now < deadline {
            let details = try dispatcher.call(HealthRequest()).details ?? [:]
            let delivered = total(details, "DeliveredTotal") - total(before, "DeliveredTotal")
            let failed = ["FailedTotal", "ExpiredChannelsTotal"].reduce(0) { $0 + total(details, $1) - total(before, $1) }
            if delivered >= devices { return .success(seconds(since: start)) }
            if delivered + failed >= devices { return .failure(BenchError("\(failed) of \(devices) failed")) }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return .failure(BenchError("not all \(devices) delivered within 60 s"))
    }

    /// What curl's write-out lines said: connections opened, HTTP versions used.
    struct CurlLines {
        var connections = 0
        var versions: Set<String> = []
    }

    /// One run of curl sending the requests of `config` over one connection (it waits to multiplex,
    /// since --parallel-immediate is not given), timed from start to exit.
    static func runCurl(_ curl: String, config: URL, requests: Int, parallel: Int = curlStreams) throws -> (Round, CurlLines) {
        let output = config.appendingPathExtension("out")
        let errors = config.appendingPathExtension("err")
        try Data().write(to: output)
        try Data().write(to: errors)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: curl)
        process.arguments = ["--no-progress-meter", "--parallel", "--parallel-max", String(parallel), "--config", config.path]
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = try FileHandle(forWritingTo: errors)
        let start = ContinuousClock.now
        try process.run()
        process.waitUntilExit()
        let elapsed = seconds(since: start)
        // One line a request, from write-out: status, connections it opened, HTTP version.
        let lines = try String(contentsOf: output, encoding: .utf8).split(separator: "\n").map { $0.split(separator: " ") }
        let succeeded = lines.filter { $0.first.flatMap { Int($0) }.map { (200...299).contains($0) } ?? false }.count
        let said = CurlLines(
            connections: lines.reduce(0) { $0 + ($1.count > 1 ? Int($1[1]) ?? 0 : 0) },
            versions: Set(lines.compactMap { $0.count > 2 ? String($0[2]) : nil }))
        guard process.terminationStatus == 0 && succeeded == requests else {
            let problem = (try? String(contentsOf: errors, encoding: .utf8))?.split(separator: "\n").first.map(String.init) ?? ""
            return (.failure(BenchError("\(succeeded) of \(requests) succeeded, exit \(process.terminationStatus) \(problem)")), said)
        }
        return (.success(elapsed), said)
    }

    /// The rounds of one figure: their times, what went wrong, and what the stand-in counted.
    struct Measured {
        var rounds = Rounds()
        var standIn = StandInStats()
        /// Connections curl said it opened (from write-out's num_connects); the hub's are the stand-in's count.
        var connections = 0
        var versions: Set<String> = []

        mutating func add(_ round: Round, round number: Int, standIn counted: StandInStats, curl: CurlLines? = nil) {
            rounds.add(round, round: number)
            standIn = standIn.plus(counted)
            connections += curl?.connections ?? 0
            versions.formUnion(curl?.versions ?? [])
        }

        func result(name: String, devices: Int, baseline: String? = nil, note: String) -> BenchResult {
            var checks = "stand-in: \(standIn.requests.formatted()) requests, \(standIn.failed) refused, "
                + "\(standIn.connections) TLS connection(s) in \(rounds.seconds.count) rounds"
            if !versions.isEmpty { checks += "; curl: \(connections) connect(s), HTTP/\(versions.sorted().joined(separator: ","))" }
            return rounds.result(name: name, unit: "push/s", count: devices, baseline: baseline, note: "\(note); \(checks)")
        }
    }
}

/// What a stand-in counted, from its `GET /_standins/stats`.
struct StandInStats: Decodable {
    var requests = 0
    var failed = 0
    var connections = 0

    func minus(_ earlier: StandInStats) -> StandInStats {
        StandInStats(requests: requests - earlier.requests, failed: failed - earlier.failed, connections: connections - earlier.connections)
    }

    func plus(_ other: StandInStats) -> StandInStats {
        StandInStats(requests: requests + other.requests, failed: failed + other.failed, connections: connections + other.connections)
    }
}

/// The stand-in push services as a child process, in a temporary folder of their own.
final class StandInProcess {
    /// standins.json, the parts the benchmark uses.
    struct Config: Decodable {
        struct Apple: Decodable {
            var endpoint, keyFile, keyId, teamId, bundleId: String
        }
        struct WebPush: Decodable {
            var origin, subscribe: String
        }
        struct Wns: Decodable {
            var origin, tenantId, clientId, secret, entraTokenEndpoint, channelDomain: String
        }
        var caFile: String
        var apple: Apple
        var webpush: WebPush
        var wns: Wns
    }

    let folder: URL
    let config: Config
    private let child: ChildScript

    private init(folder: URL, config: Config, child: ChildScript) {
        self.folder = folder
        self.config = config
        self.child = child
    }

    /// Starts `python3 script --dir TMP --quiet --no-record` and waits for its `ready` line.
    static func start(script: String, timeout: TimeInterval = 30) throws -> StandInProcess {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-bench-standins-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let child: ChildScript
        do {
            child = try ChildScript.start(
                [script, "--dir", folder.path, "--quiet", "--no-record"], what: "the stand-in push services",
                hint: "; make deps installs their Python packages", timeout: timeout) { $0 == "ready" }
        } catch {
            try? FileManager.default.removeItem(at: folder)
            throw error
        }
        do {
            guard let data = FileManager.default.contents(atPath: folder.appendingPathComponent("standins.json").path) else {
                throw BenchUnavailable("the stand-in push services said ready but wrote no \(folder.path)/standins.json")
            }
            return StandInProcess(folder: folder, config: try JSONDecoder().decode(Config.self, from: data), child: child)
        } catch {
            child.stop()
            try? FileManager.default.removeItem(at: folder)
            throw error as? BenchUnavailable ?? BenchError("\(folder.path)/standins.json: \(error)")
        }
    }

    func stop() {
        child.stop()
        try? FileManager.default.removeItem(at: folder)
    }
}

/// The benchmark's own requests to the stand-ins (subscriptions, counts), through the Push
/// module's HTTP client with the stand-ins' CA.
final class StandInClient {
    /// A Web Push subscription the stand-in made, with its keys decoded.
    struct Subscription {
        var endpoint: String
        var p256dh: Data
        var auth: Data
        /// As a browser installation's push channel: canonical JSON, sorted keys.
        var channel: String
    }

    private let client: PushHTTPClient

    init(caFile: String) {
        var settings = PushHTTPClient.Settings()
        settings.caFile = caFile
        client = PushHTTPClient(settings: settings)
    }

    func stop() { client.stop() }

    /// Sends `requests` at once and waits for every answer.
    func send(_ requests: [PushHTTPRequest], timeout: TimeInterval = 120) throws -> [PushHTTPResponse] {
        let answers = Mutex([PushHTTPResponse?](repeating: nil, count: requests.count))
        let group = DispatchGroup()
        for (index, request) in requests.enumerated() {
            group.enter()
            client.send(request) { response in
                answers.withLock { $0[index] = response }
                group.leave()
            }
        }
        guard group.wait(timeout: .now() + timeout) == .success else {
            throw BenchError("the stand-ins did not answer \(requests.count) requests within \(Int(timeout)) s")
        }
        return answers.withLock { $0.compactMap { $0 } }
    }

    func stats(_ origin: String) throws -> StandInStats {
        let response = try send([PushHTTPRequest(url: "\(origin)/_standins/stats", method: "GET", headers: [], body: Data())])[0]
        guard response.status == 200, let stats = try? JSONDecoder().decode(StandInStats.self, from: response.body) else {
            throw BenchError("\(origin)/_standins/stats answered \(response.status) \(response.transportError ?? "")")
        }
        return stats
    }

    /// An OAuth access token for client credentials posted as a form to `url`.
    func token(at url: String, form: [(String, String)]) throws -> String {
        let body = form.map { SharedAccessSignature.urlEncode($0.0) + "=" + SharedAccessSignature.urlEncode($0.1) }.joined(separator: "&")
        let response = try send([PushHTTPRequest(url: url, headers: [("content-type", "application/x-www-form-urlencoded")], body: Data(body.utf8))])[0]
        guard response.status == 200, let object = try? JSONSerialization.jsonObject(with: response.body) as? [String: Any],
            let token = object["access_token"] as? String
        else {
            throw BenchError("\(url) answered \(response.status) \(response.transportError ?? ""), not a token")
        }
        return token
    }

    func subscribe(_ count: Int, at url: String) throws -> [Subscription] {
        try send(Array(repeating: PushHTTPRequest(url: url, headers: [], body: Data()), count: count)).map { response in
            guard response.status == 201, let object = try? JSONSerialization.jsonObject(with: response.body) as? [String: String],
                let endpoint = object["endpoint"], let p256dhText = object["p256dh"], let authText = object["auth"],
                let p256dh = Data(base64URL: p256dhText), let auth = Data(base64URL: authText)
            else {
                throw BenchError("\(url) answered \(response.status) \(response.transportError ?? ""), not a subscription")
            }
            let channel = ["endpoint": endpoint, "p256dh": p256dhText, "auth": authText]
            let json = try JSONSerialization.data(withJSONObject: channel, options: [.sortedKeys, .withoutEscapingSlashes])
            return Subscription(endpoint: endpoint, p256dh: p256dh, auth: auth, channel: String(decoding: json, as: UTF8.self))
        }
    }
}

/// A curl config file (`curl --config FILE`): a line per option, `name = "value"` with the value
/// quoted as curl's parser reads it back (backslash, double quote, newline, carriage return and
/// tab escaped), a bare `name` for a switch, and `next` between requests, so that each request's
/// URL, headers, body and output are its own (curl resets them at `next`, keeping only global options).
enum CurlConfig {
    typealias Option = (name: String, value: String?)

    enum Body {
        /// Sent as it is (`data-raw`: no @file, no stripping of newlines).
        case raw(String)
        /// A file's bytes as they are (`data-binary = "@path"`).
        case file(String)
    }

    /// The escapes curl's config parser reads in a quoted value.
    static let escapes: [Unicode.Scalar: String] = ["\\": "\\\\", "\"": "\\\"", "\n": "\\n", "\r": "\\r", "\t": "\\t"]

    static func quoted(_ value: String) -> String {
        "\"" + value.unicodeScalars.map { escapes[$0] ?? String($0) }.joined() + "\""
    }

    static func line(_ option: Option) -> String {
        option.value.map { "\(option.name) = \(quoted($0))" } ?? option.name
    }

    /// The requests in order, `next` between them.
    static func text(_ requests: [[Option]]) -> String {
        requests.map { $0.map(line).joined(separator: "\n") + "\n" }.joined(separator: "next\n")
    }

    /// One POST over HTTP/2 (or HTTP/1.1) with these headers and body, trusting `caFile`, its
    /// answer's body dropped and a line written instead: status, connections opened for it, HTTP
    /// version. No User-Agent, as the hub sends none; no Expect, as the hub sends none.
    static func request(url: String, headers: [(String, String)], body: Body, caFile: String, http2: Bool = true) -> [Option] {
        var options: [Option] = [("url", url), ("cacert", caFile), (http2 ? "http2" : "http1.1", nil), ("output", "/dev/null"), ("user-agent", "")]
        // HTTP/1.1 asks before a body of more than a kilobyte (Expect: 100-continue), as the hub does not.
        if !http2 { options.append(("header", "Expect:")) }
        options.append(("write-out", "%{response_code} %{num_connects} %{http_version}\n"))
        options += headers.map { ("header", "\($0.0): \($0.1)") }
        switch body {
        case .raw(let text): options.append(("data-raw", text))
        case .file(let path): options.append(("data-binary", "@" + path))
        }
        return options
    }
}
