import Auth
import Foundation
import HubProtocol
import Testing

@testable import Push

/// How each push service's requests are made and its answers read, without a network.
@Suite struct PushSenderTests {
    static let key = P256Key.generate()
    static let apple = AppleSettings(key: key.privateKeyPEM, keyId: "ABC123DEFG", teamId: "TEAM123456", bundleId: "com.example.app")
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func message(_ platform: Platform, channel: String, payload: String, headers: [String: String] = [:]) -> PushMessage {
        PushMessage(
            deliveryId: "n1/i1/t", notificationId: "n1", installationId: "i1", platform: platform, pushChannel: channel, payload: payload,
            headers: headers, expiresAt: now.addingTimeInterval(600))
    }

    static func noFiles(_ path: String) throws(PushConfigurationError) -> String { throw PushConfigurationError("no file \(path)") }

    func header(_ request: PushHTTPRequest, _ name: String) -> String? { request.headers.first { $0.0 == name }?.1 }

    // MARK: APNs

    @Test func appleRequestCarriesAVerifiableTokenAndTheNotificationsHeaders() throws {
        let sender = try AppleSender(Self.apple, readFile: Self.noFiles)
        let request = try sender.request(
            for: Self.message(.apns, channel: String(repeating: "AB", count: 32), payload: #"{"aps":{"alert":"hi"}}"#,
                              headers: ["apns-collapse-id": "scores"]), now: Self.now)
        #expect(request.url == "https://api.push.apple.com/3/device/" + String(repeating: "ab", count: 32))
        #expect(header(request, "apns-topic") == "com.example.app")
        #expect(header(request, "apns-push-type") == "alert")
        #expect(header(request, "apns-priority") == "10")
        #expect(header(request, "apns-expiration") == String(1_800_000_600))
        #expect(header(request, "apns-collapse-id") == "scores")
        #expect(header(request, "apns-id") == AppleSender.uuid(for: "n1/i1/t"))
        let jwt = try #require(header(request, "authorization")?.replacingOccurrences(of: "bearer ", with: ""))
        let parts = jwt.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let signed = Data("\(parts[0]).\(parts[1])".utf8)
        #expect(Self.key.verifyES256(try #require(Data(base64URL: parts[2])), for: signed))
        let headerJSON = try JSONSerialization.jsonObject(with: try #require(Data(base64URL: parts[0]))) as? [String: String]
        #expect(headerJSON?["kid"] == "ABC123DEFG")
        #expect(headerJSON?["alg"] == "ES256")
        let claims = try JSONSerialization.jsonObject(with: try #require(Data(base64URL: parts[1]))) as? [String: Any]
        #expect(claims?["iss"] as? String == "TEAM123456")
        #expect((claims?["iat"] as? NSNumber)?.intValue == 1_800_000_000)
    }

    @Test func appleTokenIsReusedThenRenewed() throws {
        let sender = try AppleSender(Self.apple, readFile: Self.noFiles)
        let message = Self.message(.apns, channel: "abcd", payload: #"{"aps":{"alert":"hi"}}"#)
        let first = header(try sender.request(for: message, now: Self.now), "authorization")
        #expect(header(try sender.request(for: message, now: Self.now.addingTimeInterval(49 * 60)), "authorization") == first)
        #expect(header(try sender.request(for: message, now: Self.now.addingTimeInterval(51 * 60)), "authorization") != first)
        let renewed = header(try sender.request(for: message, now: Self.now.addingTimeInterval(51 * 60)), "authorization")
        sender.renew(now: Self.now)
        #expect(header(try sender.request(for: message, now: Self.now.addingTimeInterval(52 * 60)), "authorization") != renewed)
    }

    @Test func appleBackgroundNotificationGoesAtPriorityFive() throws {
        let sender = try AppleSender(Self.apple, readFile: Self.noFiles)
        let request = try sender.request(for: Self.message(.apns, channel: "abcd", payload: #"{"aps":{"content-available":1}}"#), now: Self.now)
        #expect(header(request, "apns-push-type") == "background")
        #expect(header(request, "apns-priority") == "5")
        #expect(throws: PushRequestError.self) {
            try sender.request(for: Self.message(.apns, channel: "not hex", payload: #"{"aps":{}}"#), now: Self.now)
        }
    }

    @Test func appleAnswersMapToOutcomes() throws {
        let sender = try AppleSender(Self.apple, readFile: Self.noFiles)
        func answer(_ status: Int, _ reason: String? = nil, headers: [String: String] = [:]) -> PushResult {
            let body = reason.map { Data(#"{"reason":"\#($0)"}"#.utf8) } ?? Data()
            return sender.classify(PushHTTPResponse(status: status, headers: headers, body: body), now: Self.now)
        }
        #expect(answer(200) == .delivered)
        #expect(answer(410, "Unregistered") == .channelExpired(reason: "HTTP 410 Unregistered"))
        #expect(answer(400, "BadDeviceToken") == .channelExpired(reason: "HTTP 400 BadDeviceToken"))
        #expect(answer(400, "DeviceTokenNotForTopic") == .failed(outcome: "WrongToken", reason: "HTTP 400 DeviceTokenNotForTopic"))
        #expect(answer(403, "ExpiredProviderToken") == .renewCredentials(reason: "HTTP 403 ExpiredProviderToken"))
        #expect(answer(403, "InvalidProviderToken") == .failed(outcome: "InvalidCredentials", reason: "HTTP 403 InvalidProviderToken"))
        #expect(answer(413, "PayloadTooLarge") == .failed(outcome: "InvalidNotificationSize", reason: "HTTP 413 PayloadTooLarge"))
        #expect(answer(429, "TooManyRequests", headers: ["retry-after": "7"]) == .retry(reason: "HTTP 429 TooManyRequests", after: 7))
        #expect(answer(503, "ServiceUnavailable") == .retry(reason: "HTTP 503 ServiceUnavailable", after: nil))
        #expect(sender.classify(PushHTTPResponse(status: 0, transportError: "Couldn't connect to server"), now: Self.now)
                == .retry(reason: "no answer: Couldn't connect to server", after: nil))
    }

    @Test func appleSettingsAreCheckedWithClearErrors() throws {
        func refusal(_ settings: AppleSettings) -> String? {
            do {
                _ = try AppleSender(settings, readFile: Self.noFiles)
                return nil
            } catch {
                return error.description
            }
        }
        var settings = Self.apple
        settings.keyId = "short"
        #expect(refusal(settings)?.contains("push.apple.keyId 'short' must be the 10 characters") == true)
        settings = Self.apple
        settings.key = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"
        #expect(refusal(settings)?.contains(".p8") == true)
        settings = Self.apple
        settings.endpoint = "http://127.0.0.1:8443"
        #expect(refusal(settings)?.contains("must be an https:// URL") == true)
        settings = Self.apple
        settings.key = nil
        settings.keyFile = "/nonexistent/AuthKey.p8"
        #expect(refusal(settings)?.contains("/nonexistent/AuthKey.p8") == true)
        settings = Self.apple
        settings.endpoint = "sandbox"
        #expect(refusal(settings) == nil)
        #expect(try AppleSender(settings, readFile: Self.noFiles).endpoint == "https://api.sandbox.push.apple.com")
    }

    // MARK: FCM

    static func serviceAccount(tokenURI: String = "https://oauth2.example.test/token") throws -> String {
        let pem = try RSATestKey.pem()
        let account: [String: Any] = [
            "type": "service_account", "project_id": "nh-test", "private_key_id": "k1", "private_key": pem,
            "client_email": "hub@nh-test.iam.gserviceaccount.com", "token_uri": tokenURI,
        ]
        return String(decoding: try JSONSerialization.data(withJSONObject: account), as: UTF8.self)
    }

    @Test func fcmTradesAnAssertionForATokenThenSends() throws {
        let sender = try FCMSender(FCMSettings(serviceAccount: try Self.serviceAccount(), endpoint: "https://fcm.example.test"), readFile: Self.noFiles)
        guard case .fetch(let tokenRequest) = sender.authorization(now: Self.now) else {
            Issue.record("the first request must fetch a token")
            return
        }
        guard case .waiting = sender.authorization(now: Self.now) else {
            Issue.record("while a token is fetched, requests wait")
            return
        }
        #expect(tokenRequest.url == "https://oauth2.example.test/token")
        let form = String(decoding: tokenRequest.body, as: UTF8.self)
        #expect(form.hasPrefix("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="))
        let assertion = String(form.split(separator: "=").last ?? "")
        let claims = try JSONSerialization.jsonObject(with: try #require(Data(base64URL: String(assertion.split(separator: ".")[1])))) as? [String: Any]
        #expect(claims?["iss"] as? String == "hub@nh-test.iam.gserviceaccount.com")
        #expect(claims?["scope"] as? String == FCMSender.scope)
        #expect(claims?["aud"] as? String == "https://oauth2.example.test/token")
        #expect(sender.tokenAnswered(PushHTTPResponse(status: 400, body: Data(#"{"error":"invalid_grant"}"#.utf8)), now: Self.now) != nil)
        guard case .fetch = sender.authorization(now: Self.now) else {
            Issue.record("a refused token is fetched again")
            return
        }
        #expect(sender.tokenAnswered(
            PushHTTPResponse(status: 200, body: Data(#"{"access_token":"ya29.t","expires_in":3599,"token_type":"Bearer"}"#.utf8)), now: Self.now) == nil)
        guard case .ready = sender.authorization(now: Self.now) else {
            Issue.record("a token was given")
            return
        }
        let request = try sender.request(
            for: Self.message(.fcmv1, channel: "device-token", payload: #"{"message":{"notification":{"body":"hi"}}}"#), now: Self.now)
        #expect(request.url == "https://fcm.example.test/v1/projects/nh-test/messages:send")
        #expect(header(request, "authorization") == "Bearer ya29.t")
        let body = try JSONSerialization.jsonObject(with: request.body) as? [String: [String: Any]]
        #expect(body?["message"]?["token"] as? String == "device-token")
        #expect((body?["message"]?["notification"] as? [String: String])?["body"] == "hi")
        // A token is not used within a minute of its end.
        guard case .fetch = sender.authorization(now: Self.now.addingTimeInterval(3_560)) else {
            Issue.record("a token about to expire is renewed")
            return
        }
    }

    @Test func fcmAnswersMapToOutcomes() throws {
        let sender = try FCMSender(FCMSettings(serviceAccount: try Self.serviceAccount()), readFile: Self.noFiles)
        func answer(_ status: Int, _ status_: String, _ code: String? = nil, headers: [String: String] = [:]) -> PushResult {
            let details = code.map { #","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#($0)"}]"# } ?? ""
            let body = #"{"error":{"code":\#(status),"message":"m","status":"\#(status_)"\#(details)}}"#
            return sender.classify(PushHTTPResponse(status: status, headers: headers, body: Data(body.utf8)), now: Self.now)
        }
        #expect(sender.classify(PushHTTPResponse(status: 200, body: Data(#"{"name":"projects/nh-test/messages/1"}"#.utf8)), now: Self.now) == .delivered)
        #expect(answer(404, "NOT_FOUND", "UNREGISTERED") == .channelExpired(reason: "HTTP 404 UNREGISTERED"))
        #expect(answer(403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH") == .failed(outcome: "WrongToken", reason: "HTTP 403 SENDER_ID_MISMATCH"))
        #expect(answer(401, "UNAUTHENTICATED") == .renewCredentials(reason: "HTTP 401 UNAUTHENTICATED"))
        #expect(answer(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", headers: ["retry-after": "3"])
                == .retry(reason: "HTTP 429 QUOTA_EXCEEDED", after: 3))
        #expect(answer(503, "UNAVAILABLE", "UNAVAILABLE") == .retry(reason: "HTTP 503 UNAVAILABLE", after: nil))
        #expect(answer(400, "INVALID_ARGUMENT", "INVALID_ARGUMENT") == .failed(outcome: "PnsInterfaceError", reason: "HTTP 400 INVALID_ARGUMENT"))
    }

    @Test func fcmServiceAccountIsCheckedWithClearErrors() throws {
        func refusal(_ text: String) -> String? {
            do {
                _ = try FCMSender(FCMSettings(serviceAccount: text), readFile: Self.noFiles)
                return nil
            } catch {
                return error.description
            }
        }
        #expect(refusal("not json")?.contains("is not JSON") == true)
        #expect(refusal(#"{"type":"authorized_user"}"#)?.contains("FCM needs a service_account key") == true)
        #expect(refusal(#"{"type":"service_account","project_id":"p","client_email":"e"}"#)?.contains("no 'private_key'") == true)
        #expect(refusal(#"{"type":"service_account","project_id":"p","client_email":"e","private_key":"garbage"}"#)?.contains("does not load") == true)
        #expect(refusal(try Self.serviceAccount(tokenURI: "http://127.0.0.1/token"))?.contains("must be an https:// URL") == true)
        #expect(refusal(try Self.serviceAccount()) == nil)
    }

    // MARK: Web Push

    @Test func webPushEncryptsForTheSubscriptionAndSignsForItsOrigin() throws {
        let vapid = P256Key.generate()
        let sender = try WebPushSender(WebPushSettings(subject: "mailto:ops@example.com"), key: vapid)
        let subscriber = P256Key.generate()
        let auth = Crypto.randomBytes(16)
        let channel = #"{"auth":"\#(auth.base64URL)","endpoint":"https://push.example.test:8443/wp/abc","p256dh":"\#(subscriber.publicPoint.base64URL)"}"#
        let request = try sender.request(
            for: Self.message(.browser, channel: channel, payload: #"{"title":"hi"}"#, headers: ["urgency": "high", "topic": "scores"]), now: Self.now)
        #expect(request.url == "https://push.example.test:8443/wp/abc")
        #expect(header(request, "content-encoding") == "aes128gcm")
        #expect(header(request, "ttl") == "600")
        #expect(header(request, "urgency") == "high")
        #expect(header(request, "topic") == "scores")
        #expect(request.body.isEmpty, "the body is made off the dispatcher's loop")
        let body = try #require(try request.makeBody?())
        #expect(try WebPushEncryption.decrypt(body, subscriber: subscriber, auth: auth) == Data(#"{"title":"hi"}"#.utf8))
        let authorization = try #require(header(request, "authorization"))
        #expect(authorization.hasPrefix("vapid t="))
        #expect(authorization.hasSuffix(", k=\(vapid.publicPoint.base64URL)"))
        let jwt = String(authorization.dropFirst("vapid t=".count).prefix { $0 != "," })
        let parts = jwt.split(separator: ".").map(String.init)
        #expect(vapid.verifyES256(try #require(Data(base64URL: parts[2])), for: Data("\(parts[0]).\(parts[1])".utf8)))
        let claims = try JSONSerialization.jsonObject(with: try #require(Data(base64URL: parts[1]))) as? [String: Any]
        #expect(claims?["aud"] as? String == "https://push.example.test:8443")
        #expect(claims?["sub"] as? String == "mailto:ops@example.com")
        let expiry = try #require((claims?["exp"] as? NSNumber)?.doubleValue)
        #expect(expiry > Self.now.timeIntervalSince1970 && expiry <= Self.now.timeIntervalSince1970 + 86_400)
    }

    @Test func webPushRefusesWhatItCannotCarry() throws {
        let sender = try WebPushSender(WebPushSettings(subject: "mailto:ops@example.com"), key: P256Key.generate())
        let subscriber = P256Key.generate()
        let channel = #"{"auth":"\#(Crypto.randomBytes(16).base64URL)","endpoint":"https://push.example.test/wp","p256dh":"\#(subscriber.publicPoint.base64URL)"}"#
        let big = String(repeating: "x", count: WebPushEncryption.maxPlaintext + 1)
        #expect(throws: PushRequestError(outcome: "InvalidNotificationSize", reason: "the payload is \(big.utf8.count) bytes; Web Push carries at most \(WebPushEncryption.maxPlaintext) once encrypted")) {
            try sender.request(for: Self.message(.browser, channel: channel, payload: big), now: Self.now)
        }
        let plain = #"{"auth":"AAAA","endpoint":"http://push.example.test/wp","p256dh":"AAAA"}"#
        #expect(throws: PushRequestError.self) { try sender.request(for: Self.message(.browser, channel: plain, payload: "{}"), now: Self.now) }
        #expect(throws: PushConfigurationError.self) { try WebPushSender(WebPushSettings(subject: "ops@example.com"), key: P256Key.generate()) }
    }

    @Test func webPushAnswersMapToOutcomes() throws {
        let sender = try WebPushSender(WebPushSettings(subject: "mailto:ops@example.com"), key: P256Key.generate())
        func answer(_ status: Int, headers: [String: String] = [:]) -> PushResult {
            sender.classify(PushHTTPResponse(status: status, headers: headers), now: Self.now)
        }
        #expect(answer(201) == .delivered)
        #expect(answer(410) == .channelExpired(reason: "HTTP 410"))
        #expect(answer(404) == .channelExpired(reason: "HTTP 404"))
        #expect(answer(429, headers: ["retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"]) == .retry(reason: "HTTP 429 TooManyRequests", after: 0))
        #expect(answer(403) == .failed(outcome: "InvalidCredentials", reason: "HTTP 403"))
    }

    @Test func retryAfterTakesSecondsOrADate() {
        let now = Date(timeIntervalSince1970: 1_445_412_480)  // Wed, 21 Oct 2015 07:28:00 GMT
        #expect(PushHTTPResponse(status: 429, headers: ["retry-after": "120"]).retryAfter(now: now) == 120)
        #expect(PushHTTPResponse(status: 429, headers: ["retry-after": "Wed, 21 Oct 2015 07:29:00 GMT"]).retryAfter(now: now) == 60)
        #expect(PushHTTPResponse(status: 429, headers: ["retry-after": "soon"]).retryAfter(now: now) == nil)
        #expect(PushHTTPResponse(status: 429).retryAfter(now: now) == nil)
    }

    @Test func errorCodesAreTheServicesOwnWords() {
        #expect(PushQueue.code("HTTP 410 Unregistered") == "Unregistered")
        #expect(PushQueue.code("HTTP 503") == "503")
        #expect(PushQueue.code(#"HTTP 410 {"code":410,"errno":103}"#) == "410")
        #expect(PushQueue.code("no answer: Couldn't connect to server") == "NoAnswer")
    }
}

/// An RSA key made with the `openssl` command, for the service-account tests.
enum RSATestKey {
    static func pem() throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}
