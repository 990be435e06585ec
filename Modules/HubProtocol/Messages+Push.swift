/// How the dispatcher reaches the platforms' own push services: Apple's (APNs), Firebase's (FCM
/// HTTP v1), browsers' (Web Push), Windows' (WNS), Amazon's (ADM) and Baidu's. A service without
/// settings is not delivered to; its installations' deliveries fail as PnsUnavailable.
public struct PushSettings: Codable, Sendable, Equatable {
    public var apple: AppleSettings?
    public var fcm: FCMSettings?
    public var browser: WebPushSettings?
    public var wns: WNSSettings?
    public var adm: ADMSettings?
    public var baidu: BaiduSettings?
    /// The domain every WNS channel URI is under (`https://<host>.notify.windows.com/…`): a
    /// registration with a channel anywhere else is refused, so that the hub never posts to an
    /// address a client chose. Another domain is for a private gateway, or the tests' stand-in.
    public var wnsChannelDomain: String = "notify.windows.com"
    /// A PEM file of certificate authorities to trust instead of the system's, for a push service
    /// behind a private authority (and the tests' stand-ins).
    public var caFile: String?
    /// Connections to each push service's host, at most; HTTP/2 carries many requests on each, and
    /// another is opened when those open have no stream free.
    public var connectionsPerHost: Int = 4
    /// Requests in flight on one connection (HTTP/2 streams), at most what the service allows.
    public var streamsPerConnection: Int = 100
    /// Requests in flight to all push services at once.
    public var maxInFlight: Int = 1_000
    /// Milliseconds a request may take from when it goes out; then it is tried again.
    public var timeoutMs: Int = 30_000
    /// Milliseconds with requests out to a service and no answer to any: its connections are closed
    /// as stuck, and new ones opened.
    public var stallMs: Int = 10_000

    public init(apple: AppleSettings? = nil, fcm: FCMSettings? = nil, browser: WebPushSettings? = nil, caFile: String? = nil) {
        self.apple = apple
        self.fcm = fcm
        self.browser = browser
        self.caFile = caFile
    }
}

/// APNs with token-based authentication: the `.p8` key Apple issues, its key id, the team id and
/// the app's bundle id.
public struct AppleSettings: Codable, Sendable, Equatable {
    /// The `.p8` file, or `key` with its PEM text (as set over the bus; kept in a 0600 file).
    public var keyFile: String?
    public var key: String?
    /// Ten characters, as Apple shows them.
    public var keyId: String
    public var teamId: String
    /// The app's bundle id, sent as `apns-topic` unless a send names another.
    public var bundleId: String
    /// `production`, `sandbox`, or an https:// URL; `production` when none was given.
    public var endpoint: String {
        get { givenEndpoint ?? "production" }
        set { givenEndpoint = newValue }
    }
    /// The endpoint as given; nil when it was left out, so that new credentials keep the one in force.
    public var givenEndpoint: String?

    public init(keyFile: String? = nil, key: String? = nil, keyId: String, teamId: String, bundleId: String, endpoint: String? = nil) {
        self.keyFile = keyFile
        self.key = key
        self.keyId = keyId
        self.teamId = teamId
        self.bundleId = bundleId
        givenEndpoint = endpoint
    }
}

/// FCM HTTP v1: a Google service account's JSON key, traded for OAuth 2 access tokens.
public struct FCMSettings: Codable, Sendable, Equatable {
    /// The service account's JSON file, or `serviceAccount` with its text.
    public var serviceAccountFile: String?
    public var serviceAccount: String?
    /// Where `messages:send` is, `https://fcm.googleapis.com` unless set.
    public var endpoint: String {
        get { givenEndpoint ?? "https://fcm.googleapis.com" }
        set { givenEndpoint = newValue }
    }
    /// The endpoint as given; nil when it was left out, so that new credentials keep the one in force.
    public var givenEndpoint: String?

    public init(serviceAccountFile: String? = nil, serviceAccount: String? = nil, endpoint: String? = nil) {
        self.serviceAccountFile = serviceAccountFile
        self.serviceAccount = serviceAccount
        givenEndpoint = endpoint
    }
}

/// Web Push with VAPID: the hub signs for itself with a key pair it makes once and keeps.
public struct WebPushSettings: Codable, Sendable, Equatable {
    /// Who push services may contact about this hub's traffic: a `mailto:` or `https:` URL.
    public var subject: String
    /// The VAPID private key (PEM). Absent: `vapid-key.pem` in the data folder, made on first use.
    public var keyFile: String?

    public init(subject: String, keyFile: String? = nil) {
        self.subject = subject
        self.keyFile = keyFile
    }
}

/// Windows Push Notification Services, in either form of credentials Notification Hubs users hold:
/// the app's Package SID and client secret (a token from the Microsoft account service, scope
/// `notify.windows.com`), or a Microsoft Entra application: its directory (tenant) id, client id
/// and secret (a token from Entra, scope `https://wns.windows.com/.default`). A delivery is a POST
/// to the device's channel URI, under `wnsChannelDomain`.
public struct WNSSettings: Codable, Sendable, Equatable {
    /// `ms-app://S-1-15-2-…`, as the Store dashboard shows it (the classic form).
    public var packageSid: String?
    /// The Entra form: the directory (tenant) id and the application (client) id.
    public var tenantId: String?
    public var clientId: String?
    /// The client secret of either form.
    public var secret: String?
    /// Where tokens come from; https://login.live.com/accesstoken.srf (classic) or
    /// https://login.microsoftonline.com/{tenantId}/oauth2/v2.0/token (Entra) when left out.
    public var tokenEndpoint: String?

    public init(packageSid: String? = nil, tenantId: String? = nil, clientId: String? = nil, secret: String? = nil, tokenEndpoint: String? = nil) {
        self.packageSid = packageSid
        self.tenantId = tenantId
        self.clientId = clientId
        self.secret = secret
        self.tokenEndpoint = tokenEndpoint
    }
}

/// Amazon Device Messaging: the security profile's client id and secret, traded at Login with
/// Amazon for a token of scope `messaging:push`.
public struct ADMSettings: Codable, Sendable, Equatable {
    /// `amzn1.application-oa2-client.…`
    public var clientId: String
    public var clientSecret: String
    /// Where `/messaging/registrations/{id}/messages` is; https://api.amazon.com when left out.
    public var endpoint: String?
    /// Login with Amazon's token endpoint; https://api.amazon.com/auth/o2/token when left out.
    public var tokenEndpoint: String?

    public init(clientId: String, clientSecret: String, endpoint: String? = nil, tokenEndpoint: String? = nil) {
        self.clientId = clientId
        self.clientSecret = clientSecret
        self.endpoint = endpoint
        self.tokenEndpoint = tokenEndpoint
    }
}

/// Baidu Cloud Push (REST API 3.0): the app's API key and secret key; each request is signed.
public struct BaiduSettings: Codable, Sendable, Equatable {
    public var apiKey: String
    public var secretKey: String
    /// The API's base; https://api.tuisong.baidu.com/rest/3.0 when left out.
    public var endpoint: String?

    public init(apiKey: String, secretKey: String, endpoint: String? = nil) {
        self.apiKey = apiKey
        self.secretKey = secretKey
        self.endpoint = endpoint
    }
}

/// Names of the push services, as credentials and settings name them.
public enum PushServiceName {
    public static let apple = "apple"
    public static let fcm = "fcm"
    public static let browser = "browser"
    public static let wns = "wns"
    public static let adm = "adm"
    public static let baidu = "baidu"
    public static let all = [apple, fcm, browser, wns, adm, baidu]
}

/// Sets one push service's credentials (Manage). They are checked before they are kept: a key
/// that does not load, an id of the wrong shape or an endpoint that is not https is refused.
public struct PushCredentialsSetRequest: HubRequest {
    public typealias Reply = PushCredentialsReply
    public static let messageType: MessageType = "push.credentials.set"
    public var apple: AppleSettings?
    public var fcm: FCMSettings?
    public var browser: WebPushSettings?
    public var wns: WNSSettings?
    public var adm: ADMSettings?
    public var baidu: BaiduSettings?
    /// Names of services whose credentials are removed: `apple`, `fcm`, `browser`, `wns`, `adm` or `baidu`.
    public var remove: [String]?

    public init(
        apple: AppleSettings? = nil, fcm: FCMSettings? = nil, browser: WebPushSettings? = nil, wns: WNSSettings? = nil,
        adm: ADMSettings? = nil, baidu: BaiduSettings? = nil, remove: [String]? = nil
    ) {
        self.apple = apple
        self.fcm = fcm
        self.browser = browser
        self.wns = wns
        self.adm = adm
        self.baidu = baidu
        self.remove = remove
    }
}

/// What the dispatcher delivers with, secrets left out (Manage).
public struct PushCredentialsRequest: HubRequest {
    public typealias Reply = PushCredentialsReply
    public static let messageType: MessageType = "push.credentials"
    public init() {}
}

public struct PushCredentialsReply: HubMessage {
    public static let messageType: MessageType = "push.credentials.reply"
    public var services: [PushServiceInfo]

    public init(services: [PushServiceInfo]) { self.services = services }
}

/// One push service as configured, without its secret: what identifies the key, not the key.
public struct PushServiceInfo: Codable, Sendable, Equatable {
    /// `apple`, `fcm`, `browser`, `wns`, `adm` or `baidu`.
    public var service: String
    public var platform: String
    public var endpoint: String
    /// `config` (the configuration file) or `set` (set over the bus, kept in the data folder).
    public var source: String
    /// Non-secret settings: key id, team id, bundle id, project id, client email, subject.
    public var settings: [String: String]
    /// The public key's SHA-256, in hex: which key is in use, never the key itself.
    public var keyFingerprint: String?
    /// For Web Push: the VAPID public key (base64url), the `applicationServerKey` browsers subscribe with.
    public var publicKey: String?

    public init(
        service: String, platform: String, endpoint: String, source: String, settings: [String: String], keyFingerprint: String? = nil,
        publicKey: String? = nil
    ) {
        self.service = service
        self.platform = platform
        self.endpoint = endpoint
        self.source = source
        self.settings = settings
        self.keyFingerprint = keyFingerprint
        self.publicKey = publicKey
    }
}

// Absent fields take their defaults, so that a configuration file names only what it sets; what is
// still missing is reported, with its name, when the settings are checked.
extension PushSettings {
    enum CodingKeys: String, CodingKey {
        case apple, fcm, browser, wns, adm, baidu, wnsChannelDomain, caFile, connectionsPerHost, streamsPerConnection, maxInFlight
        case timeoutMs, stallMs
    }
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        apple = try c.decodeIfPresent(AppleSettings.self, forKey: .apple)
        fcm = try c.decodeIfPresent(FCMSettings.self, forKey: .fcm)
        browser = try c.decodeIfPresent(WebPushSettings.self, forKey: .browser)
        wns = try c.decodeIfPresent(WNSSettings.self, forKey: .wns)
        adm = try c.decodeIfPresent(ADMSettings.self, forKey: .adm)
        baidu = try c.decodeIfPresent(BaiduSettings.self, forKey: .baidu)
        if let value = try c.decodeIfPresent(String.self, forKey: .wnsChannelDomain) { wnsChannelDomain = value }
        caFile = try c.decodeIfPresent(String.self, forKey: .caFile)
        // Each absent number keeps the default its declaration gives.
        if let value = try c.decodeIfPresent(Int.self, forKey: .connectionsPerHost) { connectionsPerHost = value }
        if let value = try c.decodeIfPresent(Int.self, forKey: .streamsPerConnection) { streamsPerConnection = value }
        if let value = try c.decodeIfPresent(Int.self, forKey: .maxInFlight) { maxInFlight = value }
        if let value = try c.decodeIfPresent(Int.self, forKey: .timeoutMs) { timeoutMs = value }
        if let value = try c.decodeIfPresent(Int.self, forKey: .stallMs) { stallMs = value }
    }
}

extension AppleSettings {
    enum CodingKeys: String, CodingKey {
        case keyFile, key, keyId, teamId, bundleId
        case givenEndpoint = "endpoint"
    }
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        keyFile = try c.decodeIfPresent(String.self, forKey: .keyFile)
        key = try c.decodeIfPresent(String.self, forKey: .key)
        keyId = try c.decodeIfPresent(String.self, forKey: .keyId) ?? ""
        teamId = try c.decodeIfPresent(String.self, forKey: .teamId) ?? ""
        bundleId = try c.decodeIfPresent(String.self, forKey: .bundleId) ?? ""
        givenEndpoint = try c.decodeIfPresent(String.self, forKey: .givenEndpoint)
    }
}

extension FCMSettings {
    enum CodingKeys: String, CodingKey {
        case serviceAccountFile, serviceAccount
        case givenEndpoint = "endpoint"
    }
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        serviceAccountFile = try c.decodeIfPresent(String.self, forKey: .serviceAccountFile)
        serviceAccount = try c.decodeIfPresent(String.self, forKey: .serviceAccount)
        givenEndpoint = try c.decodeIfPresent(String.self, forKey: .givenEndpoint)
    }
}

extension ADMSettings {
    enum CodingKeys: String, CodingKey { case clientId, clientSecret, endpoint, tokenEndpoint }
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        clientId = try c.decodeIfPresent(String.self, forKey: .clientId) ?? ""
        clientSecret = try c.decodeIfPresent(String.self, forKey: .clientSecret) ?? ""
        endpoint = try c.decodeIfPresent(String.self, forKey: .endpoint)
        tokenEndpoint = try c.decodeIfPresent(String.self, forKey: .tokenEndpoint)
    }
}

extension BaiduSettings {
    enum CodingKeys: String, CodingKey { case apiKey, secretKey, endpoint }
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        apiKey = try c.decodeIfPresent(String.self, forKey: .apiKey) ?? ""
        secretKey = try c.decodeIfPresent(String.self, forKey: .secretKey) ?? ""
        endpoint = try c.decodeIfPresent(String.self, forKey: .endpoint)
    }
}

extension WebPushSettings {
    enum CodingKeys: String, CodingKey { case subject, keyFile }
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        subject = try c.decodeIfPresent(String.self, forKey: .subject) ?? ""
        keyFile = try c.decodeIfPresent(String.self, forKey: .keyFile)
    }
}
