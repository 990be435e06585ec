import Foundation
import HubProtocol
import Testing

@testable import Push

/// WNS, ADM and Baidu requests made and answers read as each service documents them, without a network.
@Suite struct WindowsAmazonBaiduSenderTests {
    static let now = PushSenderTests.now
    typealias Base = PushSenderTests

    func header(_ request: PushHTTPRequest, _ name: String) -> String? { request.headers.first { $0.0 == name }?.1 }

    func form(_ request: PushHTTPRequest) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in String(decoding: request.body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            fields[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return fields
    }

    static let channel = "https://db5.notify.windows.com/?token=AwYAAAD"

    static func wns(_ settings: WNSSettings = WNSSettings(tenantId: "tenant-1", clientId: "client-1", secret: "s3cret")) throws -> WNSSender {
        try WNSSender(settings, channelDomain: "notify.windows.com")
    }

    /// A sender holding a token, as after a token exchange.
    static func ready<S: PushSender>(_ sender: S, token: String = "t0k") -> S {
        guard case .fetch = sender.authorization(now: now) else { return sender }
        _ = sender.tokenAnswered(PushHTTPResponse(status: 200, body: Data(#"{"access_token":"\#(token)","expires_in":3600}"#.utf8)), now: now)
        return sender
    }

    // MARK: WNS

    @Test func wnsTakesEitherFormOfCredentialsAndAsksForItsScope() throws {
        let entra = try Self.wns()
        guard case .fetch(let request) = entra.authorization(now: Self.now) else { Issue.record("no token request"); return }
        #expect(request.url == "https://login.microsoftonline.com/tenant-1/oauth2/v2.0/token")
        #expect(form(request) == ["grant_type": "client_credentials", "client_id": "client-1", "client_secret": "s3cret", "scope": "https://wns.windows.com/.default"])
        guard case .waiting = entra.authorization(now: Self.now) else { Issue.record("a second request waits for the token"); return }
        // Entra gives expires_in as a string.
        #expect(entra.tokenAnswered(PushHTTPResponse(status: 200, body: Data(#"{"token_type":"Bearer","expires_in":"86399","access_token":"e1"}"#.utf8)), now: Self.now) == nil)
        guard case .ready = entra.authorization(now: Self.now.addingTimeInterval(86_300)) else { Issue.record("the token is kept"); return }
        guard case .fetch = entra.authorization(now: Self.now.addingTimeInterval(86_350)) else { Issue.record("renewed a minute before its end"); return }

        let classic = try Self.wns(WNSSettings(packageSid: "ms-app://S-1-15-2-1", secret: "pw d"))
        guard case .fetch(let token) = classic.authorization(now: Self.now) else { Issue.record("no token request"); return }
        #expect(token.url == "https://login.live.com/accesstoken.srf")
        #expect(form(token) == ["grant_type": "client_credentials", "client_id": "ms-app://S-1-15-2-1", "client_secret": "pw d", "scope": "notify.windows.com"])
        #expect(classic.tokenAnswered(PushHTTPResponse(status: 400, body: Data(#"{"error":"invalid_client"}"#.utf8)), now: Self.now)?.contains("invalid_client") == true)

        for bad in [WNSSettings(secret: "s"), WNSSettings(packageSid: "S-1-15", secret: "s"), WNSSettings(packageSid: "ms-app://x"),
                    WNSSettings(packageSid: "ms-app://x", tenantId: "t", clientId: "c", secret: "s"), WNSSettings(tenantId: "t", secret: "s")] {
            #expect(throws: PushConfigurationError.self) { try Self.wns(bad) }
        }
    }

    @Test func aTemplateWithoutAKindIsKnownByItsRootElement() {
        func kind(_ payload: String, _ headers: [String: String] = [:]) -> String {
            WNSSender.kind(of: Base.message(.wns, channel: Self.channel, payload: payload, headers: headers))
        }
        #expect(kind("<toast><visual/></toast>") == "wns/toast")
        #expect(kind(#"<?xml version="1.0" encoding="utf-8"?>\#n<!-- news --><tile><visual/></tile>"#) == "wns/tile")
        #expect(kind("\u{FEFF} <badge value=\"3\"/>") == "wns/badge")
        #expect(kind("<toaster/>") == "wns/raw")
        #expect(kind("plain bytes") == "wns/raw")
        #expect(kind("<?xml version=\"1.0\"") == "wns/raw")
        #expect(kind("<toast/>", ["x-wns-type": " WNS/Toast "]) == "wns/toast")
    }

    @Test func wnsPostsToTheChannelWithItsKindTimeToLiveAndHeaders() throws {
        let sender = Self.ready(try Self.wns())
        let toast = #"<toast><visual><binding template="ToastGeneric"><text>hi</text></binding></visual></toast>"#
        let request = try sender.request(
            for: Base.message(.wns, channel: Self.channel, payload: toast, headers: ["x-wns-type": "wns/toast", "x-wns-tag": "news1", "x-other": "no"]),
            now: Self.now)
        #expect(request.url == Self.channel && request.body == Data(toast.utf8))
        #expect(header(request, "authorization") == "Bearer t0k")
        #expect(header(request, "content-type") == "text/xml" && header(request, "x-wns-type") == "wns/toast")
        #expect(header(request, "x-wns-ttl") == "600" && header(request, "x-wns-tag") == "news1" && header(request, "x-other") == nil)
        // Raw goes as bytes; a template registered without a kind is known by its XML's root.
        let raw = try sender.request(for: Base.message(.wns, channel: Self.channel, payload: "id=7", headers: ["x-wns-type": "wns/raw"]), now: Self.now)
        #expect(header(raw, "content-type") == "application/octet-stream")
        let tile = try sender.request(for: Base.message(.wns, channel: Self.channel, payload: " <tile/>"), now: Self.now)
        #expect(header(tile, "x-wns-type") == "wns/tile")
        // Never to a host a client chose, never more than WNS takes.
        for channel in ["https://notify.windows.com.attacker.example/x", "http://db5.notify.windows.com/x", "https://evilnotify.windows.com/x"] {
            #expect(throws: PushRequestError(outcome: "BadChannel", reason: "the channel URI is not an https URL under notify.windows.com; WNS channels are")) {
                try sender.request(for: Base.message(.wns, channel: channel, payload: toast, headers: ["x-wns-type": "wns/toast"]), now: Self.now)
            }
        }
        let big = String(repeating: "x", count: 5_001)
        let tooBig = #expect(throws: PushRequestError.self) {
            try sender.request(for: Base.message(.wns, channel: Self.channel, payload: big, headers: ["x-wns-type": "wns/raw"]), now: Self.now)
        }
        #expect(tooBig?.outcome == "InvalidNotificationSize")
    }

    @Test func wnsAnswersMapToNotificationHubsOutcomes() throws {
        let sender = Self.ready(try Self.wns())
        func answer(_ status: Int, _ headers: [String: String] = [:]) -> PushResult {
            sender.classify(PushHTTPResponse(status: status, headers: headers, httpVersion: 1), now: Self.now)
        }
        #expect(answer(200, ["x-wns-status": "received", "x-wns-msg-id": "1"]) == .delivered)
        #expect(answer(200) == .delivered)
        #expect(answer(200, ["x-wns-status": "dropped", "x-wns-deviceconnectionstatus": "disconnected"])
                == .failed(outcome: "ChannelDisconnected", reason: "HTTP 200 status=dropped device=disconnected"))
        #expect(answer(200, ["x-wns-notificationstatus": "dropped"]) == .failed(outcome: "Dropped", reason: "HTTP 200 status=dropped"))
        #expect(answer(404) == .channelExpired(reason: "HTTP 404 BadChannel", outcome: "BadChannel"))
        #expect(answer(410, ["x-wns-msg-id": "9"]) == .channelExpired(reason: "HTTP 410 ExpiredChannel msg=9", outcome: "ExpiredChannel"))
        #expect(answer(406, ["retry-after": "7"]) == .retry(reason: "HTTP 406 Throttled", after: 7))
        #expect(answer(200, ["x-wns-status": "channelThrottled"]) == .retry(reason: "HTTP 200 Throttled status=channelthrottled", after: nil))
        #expect(answer(401) == .renewCredentials(reason: "HTTP 401 InvalidToken"))
        // The channel is another app's: a new token cannot help, and the channel is kept.
        #expect(answer(403) == .failed(outcome: "WrongToken", reason: "HTTP 403 WrongToken"))
        #expect(answer(413) == .failed(outcome: "InvalidNotificationSize", reason: "HTTP 413 PayloadTooLarge"))
        #expect(answer(503, ["retry-after": "2"]) == .retry(reason: "HTTP 503", after: 2))
        #expect(answer(400, ["x-wns-error-description": "bad header"]) == .failed(outcome: "PnsInterfaceError", reason: "HTTP 400 bad header"))
        #expect(sender.said(PushHTTPResponse(status: 200, headers: ["x-wns-status": "received", "x-wns-deviceconnectionstatus": "Connected"]))
                == ["X-WNS-Status: received", "X-WNS-DeviceConnectionStatus: connected"])
    }

    // MARK: ADM

    static func adm() -> ADMSender { ready(try! ADMSender(ADMSettings(clientId: "amzn1.application-oa2-client.1", clientSecret: "sec"))) }

    @Test func admTradesItsClientCredentialsAndSendsTheDataWithItsExpiry() throws {
        let fresh = try ADMSender(ADMSettings(clientId: "amzn1.application-oa2-client.1", clientSecret: "sec"))
        guard case .fetch(let token) = fresh.authorization(now: Self.now) else { Issue.record("no token request"); return }
        #expect(token.url == "https://api.amazon.com/auth/o2/token")
        #expect(header(token, "content-type") == "application/x-www-form-urlencoded;charset=UTF-8")
        #expect(form(token) == ["grant_type": "client_credentials", "scope": "messaging:push", "client_id": "amzn1.application-oa2-client.1", "client_secret": "sec"])
        let sender = Self.adm()
        let request = try sender.request(
            for: Base.message(.adm, channel: "amzn1.adm-registration.v3.Y29/x", payload: #"{"data":{"message":"hi"}}"#,
                              headers: ["x-amzn-consolidation-key": "scores"]), now: Self.now)
        #expect(request.url == "https://api.amazon.com/messaging/registrations/amzn1.adm-registration.v3.Y29%2Fx/messages")
        #expect(header(request, "x-amzn-type-version") == "com.amazon.device.messaging.ADMMessage@1.0")
        #expect(header(request, "x-amzn-accept-type") == "com.amazon.device.messaging.ADMSendResult@1.0")
        #expect(header(request, "authorization") == "Bearer t0k" && header(request, "content-type") == "application/json")
        let body = try JSONSerialization.jsonObject(with: request.body) as? [String: Any]
        #expect((body?["data"] as? [String: String]) == ["message": "hi"])
        #expect((body?["expiresAfter"] as? NSNumber)?.intValue == 600 && body?["consolidationKey"] as? String == "scores")
        // A notification message (ADM's preset keys) needs no data.
        let shown = try sender.request(for: Base.message(.adm, channel: "r", payload: #"{"notification":{"title":"T","body":"B"}}"#), now: Self.now)
        #expect((try JSONSerialization.jsonObject(with: shown.body) as? [String: Any])?["notification"] as? [String: String] == ["title": "T", "body": "B"])
        // 6 KB of payload is taken, whatever the rest of the message adds.
        let full = #"{"data":{"m":"\#(String(repeating: "x", count: 6_000))"},"consolidationKey":"\#(String(repeating: "k", count: 200))"}"#
        #expect(throws: Never.self) { try sender.request(for: Base.message(.adm, channel: "r", payload: full), now: Self.now) }
        for (payload, outcome) in [(#"{"data":{"n":1}}"#, "PnsInterfaceError"), (#"{"alert":"x"}"#, "PnsInterfaceError"),
                                   (#"{"notification":{"title":1}}"#, "PnsInterfaceError"), (#"{"consolidationKey":"k"}"#, "PnsInterfaceError"),
                                   (#"{"data":{"m":"\#(String(repeating: "x", count: 6_200))"}}"#, "InvalidNotificationSize")] {
            let refused = #expect(throws: PushRequestError.self) {
                try sender.request(for: Base.message(.adm, channel: "r", payload: payload), now: Self.now)
            }
            #expect(refused?.outcome == outcome)
        }
    }

    @Test func admAnswersMapToOutcomesAndACanonicalIdMovesTheChannel() throws {
        let sender = Self.adm()
        func answer(_ status: Int, _ body: String, headers: [String: String] = [:], to channel: String = "reg-1") -> PushResult {
            var response = PushHTTPResponse(status: status, headers: headers, body: Data(body.utf8))
            response.requestURL = "https://api.amazon.com/messaging/registrations/\(channel)/messages"
            return sender.classify(response, now: Self.now)
        }
        #expect(answer(200, #"{"registrationID":"reg-1"}"#) == .delivered)
        #expect(answer(200, #"{"registrationID":"reg-2"}"#) == .channelMoved(to: "reg-2"))
        #expect(answer(400, #"{"reason":"Unregistered"}"#) == .channelExpired(reason: "HTTP 400 Unregistered", outcome: "ExpiredChannel"))
        #expect(answer(400, #"{"reason":"InvalidRegistrationId"}"#) == .channelExpired(reason: "HTTP 400 InvalidRegistrationId", outcome: "BadChannel"))
        #expect(answer(401, #"{"reason":"AccessTokenExpired"}"#) == .renewCredentials(reason: "HTTP 401 AccessTokenExpired"))
        #expect(answer(429, #"{"reason":"MaxRateExceeded"}"#, headers: ["retry-after": "4"]) == .retry(reason: "HTTP 429 MaxRateExceeded", after: 4))
        #expect(answer(413, #"{"reason":"MessageTooLarge"}"#) == .failed(outcome: "InvalidNotificationSize", reason: "HTTP 413 MessageTooLarge"))
        #expect(answer(400, #"{"reason":"InvalidData"}"#) == .failed(outcome: "PnsInterfaceError", reason: "HTTP 400 InvalidData"))
    }

    // MARK: Baidu

    @Test func baiduSignsAsItsReferenceDoes() {
        // Worked through PHP's urlencode and md5, as Baidu's PHP SDK signs; the stand-in checks with the same steps.
        let sign = BaiduSender.signature(
            method: "POST", url: "http://api.tuisong.baidu.com/rest/3.0/push/single_device",
            parameters: [("timestamp", "1427174155"), ("apikey", "EXAMPLEAPIKEY"), ("channel_id", "3713840169076546629"), ("device_type", "3"),
                         ("msg", #"{"title":"Hi","description":"hello world"}"#), ("msg_type", "1")],
            secretKey: "EXAMPLESECRETKEY")
        #expect(sign == "eb7bb5e4fc6a2ba92cf019efae9e6218")
        #expect(FormEncoding.php("a b~*é-_.") == "a+b%7E%2A%C3%A9-_.")
    }

    @Test func baiduSendsASignedFormToTheChannelId() throws {
        let sender = try BaiduSender(BaiduSettings(apiKey: "AK", secretKey: "SK", endpoint: "https://baidu.test/rest/3.0"))
        let payload = #"{"title":"Hi","description":"a b"}"#
        let request = try sender.request(for: Base.message(.baidu, channel: "123456-3713840169076546629", payload: payload), now: Self.now)
        #expect(request.url == "https://baidu.test/rest/3.0/push/single_device")
        #expect(header(request, "content-type") == "application/x-www-form-urlencoded;charset=utf-8")
        #expect(header(request, "user-agent")?.hasPrefix("BCCS_SDK/3.0") == true)
        var fields = form(request)
        #expect(fields["channel_id"] == "3713840169076546629" && fields["msg"] == payload && fields["msg_type"] == "1")
        #expect(fields["device_type"] == "3" && fields["msg_expires"] == "600" && fields["timestamp"] == "1800000000" && fields["apikey"] == "AK")
        let sign = fields.removeValue(forKey: "sign")
        #expect(sign == BaiduSender.signature(method: "POST", url: request.url, parameters: fields.map { ($0.key, $0.value) }, secretKey: "SK"))
        // A message without description is a pass-through; iOS's aps goes as device type 4.
        #expect(form(try sender.request(for: Base.message(.baidu, channel: "3713840169076546629", payload: #"{"k":"v"}"#), now: Self.now))["msg_type"] == "0")
        #expect(form(try sender.request(for: Base.message(.baidu, channel: "1-2", payload: #"{"aps":{"alert":"x"}}"#), now: Self.now))["device_type"] == "4")
        let refused = #expect(throws: PushRequestError.self) {
            try sender.request(for: Base.message(.baidu, channel: "user-chan", payload: payload), now: Self.now)
        }
        #expect(refused?.outcome == "BadChannel")
    }

    @Test func baiduErrorCodesMapToOutcomes() throws {
        let sender = try BaiduSender(BaiduSettings(apiKey: "AK", secretKey: "SK"))
        func answer(_ status: Int, _ body: String) -> PushResult { sender.classify(PushHTTPResponse(status: status, body: Data(body.utf8)), now: Self.now) }
        #expect(answer(200, #"{"request_id":1,"response_params":{"msg_id":"2","send_time":3}}"#) == .delivered)
        #expect(answer(400, #"{"request_id":1,"error_code":30608,"error_msg":"Bind Relation Not Found"}"#)
                == .channelExpired(reason: "HTTP 400 30608 Bind Relation Not Found", outcome: "BadChannel"))
        #expect(answer(400, #"{"error_code":30607,"error_msg":"Channel Token Timeout"}"#).isChannelGone)
        #expect(answer(401, #"{"error_code":30603,"error_msg":"Authentication Failed"}"#)
                == .failed(outcome: "InvalidCredentials", reason: "HTTP 401 30603 Authentication Failed"))
        #expect(answer(400, #"{"error_code":30699,"error_msg":"Requests Are Too Frequent"}"#)
                == .retry(reason: "HTTP 400 30699 Requests Are Too Frequent", after: 60))
        #expect(answer(500, #"{"error_code":30600,"error_msg":"Internal Server Error"}"#) == .retry(reason: "HTTP 500 30600 Internal Server Error", after: nil))
        #expect(answer(400, #"{"error_code":30602,"error_msg":"Request Params Not Valid"}"#)
                == .failed(outcome: "PnsInterfaceError", reason: "HTTP 400 30602 Request Params Not Valid"))
        #expect(answer(503, "") == .retry(reason: "HTTP 503", after: nil))
        // A code no integer holds is no code Baidu has: the answer is a failure, not a trap.
        #expect(answer(400, #"{"error_code":1e400,"error_msg":"?"}"#) == .failed(outcome: "PnsInterfaceError", reason: "HTTP 400"))
        #expect(answer(400, #"{"error_code":30607.5}"#) == .failed(outcome: "PnsInterfaceError", reason: "HTTP 400"))
    }

    // MARK: All three

    @Test func aTokenLifetimeThatIsNoNumberATokenHasIsNotBelieved() throws {
        for lifetime in [#""nan""#, #""inf""#, "-5", "0", "1e12"] {
            let sender = try Self.wns()
            guard case .fetch = sender.authorization(now: Self.now) else { Issue.record("no token request"); return }
            #expect(sender.tokenAnswered(PushHTTPResponse(status: 200, body: Data(#"{"access_token":"a","expires_in":\#(lifetime)}"#.utf8)), now: Self.now) == nil)
            // Kept for the default day (less a minute), neither renewed at once nor kept for ever.
            guard case .ready = sender.authorization(now: Self.now.addingTimeInterval(3_000)) else { Issue.record("\(lifetime): not kept"); continue }
            guard case .fetch = sender.authorization(now: Self.now.addingTimeInterval(8 * 86_400)) else { Issue.record("\(lifetime): never renewed"); continue }
        }
    }

    @Test func aHeaderWithALineBreakNeverGoesOut() throws {
        let sender = Self.ready(try Self.wns())
        let request = try sender.request(
            for: Base.message(.wns, channel: Self.channel, payload: "<toast/>", headers: ["x-wns-type": "wns/toast", "x-wns-tag": "a\r\nX-Injected: 1"]),
            now: Self.now)
        let refused = #expect(throws: PushRequestError.self) { try request.checkHeaders() }
        #expect(refused?.outcome == "PnsInterfaceError")
        var clean = request
        clean.headers.removeAll { $0.0 == "x-wns-tag" }
        #expect(throws: Never.self) { try clean.checkHeaders() }
        // Registration and publish refuse such a header first, naming it.
        for (headers, word) in [(["x-wns-tag": "a\nb"], "control character"), (["x-wns tag": "a"], "must be letters"),
                                (["x-wns-tag": String(repeating: "t", count: 1_025)], "1,024")] {
            let error = #expect(throws: HubError.self) { try Platform.wns.check(payload: "<toast/>", headers: headers.merging(["x-wns-type": "wns/toast"]) { a, _ in a }) }
            #expect(error?.code == .invalidArgument && error?.message.contains(word) == true, "\(headers)")
        }
        #expect(throws: Never.self) { try Platform.wns.check(payload: "<toast/>", headers: ["x-wns-type": "wns/toast", "x-wns-tag": "news\t1 é"]) }
    }
}
