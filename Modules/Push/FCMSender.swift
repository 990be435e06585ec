import Auth
import Foundation
import HubProtocol

/// FCM HTTP v1: the service account's RS256 assertion is traded at its token endpoint for an
/// OAuth 2 access token, kept until a minute before it expires; each delivery is one
/// `POST /v1/projects/{project}/messages:send` with the device's registration token in the message.
final class FCMSender: PushSender {
    let service = PushService.fcm
    let endpoint: String
    let projectId: String
    private let clientEmail: String
    private let privateKeyId: String?
    private let tokenURI: String
    private let key: RSAKey
    private let accessToken = AccessTokenKeeper(defaultLifetime: 3_600)
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    init(_ settings: FCMSettings, readFile: (String) throws(PushConfigurationError) -> String) throws(PushConfigurationError) {
        let text: String
        if let given = settings.serviceAccount {
            text = given
        } else if let file = settings.serviceAccountFile {
            text = try readFile(file)
        } else {
            throw PushConfigurationError("push.fcm needs serviceAccountFile, the service account's JSON key from the Firebase console")
        }
        let name = settings.serviceAccountFile.map { "'\($0)'" } ?? "the service account"
        guard let account = JSONValue.parse(text)?.objectValue else {
            throw PushConfigurationError("push.fcm: \(name) is not JSON; give the service account's key file as Google issued it")
        }
        func field(_ key: String) throws(PushConfigurationError) -> String {
            guard let value = account[key]?.stringValue, !value.isEmpty else {
                throw PushConfigurationError("push.fcm: \(name) has no '\(key)'; give the service account's key file as Google issued it")
            }
            return value
        }
        if let type = account["type"]?.stringValue, type != "service_account" {
            throw PushConfigurationError("push.fcm: \(name) is a '\(type)' credential; FCM needs a service_account key")
        }
        projectId = try field("project_id")
        clientEmail = try field("client_email")
        privateKeyId = account["private_key_id"]?.stringValue
        tokenURI = try httpsEndpoint(account["token_uri"]?.stringValue ?? "https://oauth2.googleapis.com/token", setting: "push.fcm token_uri")
        do {
            key = try RSAKey(pem: try field("private_key"))
        } catch let error as PushConfigurationError {
            throw error
        } catch {
            throw PushConfigurationError("push.fcm: the private_key of \(name) does not load: \(error)")
        }
        endpoint = try httpsEndpoint(settings.endpoint, setting: "push.fcm.endpoint")
    }

    func authorization(now: Date) -> PushAuthorization {
        accessToken.authorization(now: now) {
            let issued = Int(now.timeIntervalSince1970)
            // No assertion asks for no token: the sends wait, and the credential's failure is reported as the token's.
            guard let assertion = try? JWT.rs256(
                header: privateKeyId.map { ["kid": $0] } ?? [:],
                claims: [
                    "iss": .string(clientEmail), "scope": .string(Self.scope), "aud": .string(tokenURI),
                    "iat": .number(Double(issued)), "exp": .number(Double(issued + 3_600)),
                ], key: key)
            else { return nil }
            let form = [("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", assertion)]
            return PushHTTPRequest(
                url: tokenURI, headers: [("content-type", "application/x-www-form-urlencoded")], body: Data(FormEncoding.body(form).utf8))
        }
    }

    func tokenAnswered(_ response: PushHTTPResponse, now: Date) -> String? { accessToken.answered(response, now: now) }

    func renew(now: Date) { accessToken.renew() }

    func request(for message: PushMessage, now: Date) throws(PushRequestError) -> PushHTTPRequest {
        guard var object = JSONValue.parse(message.payload)?.objectValue, var inner = object["message"]?.objectValue else {
            throw PushRequestError(outcome: "PnsInterfaceError", reason: "an fcmv1 payload needs a 'message' object")
        }
        guard !message.pushChannel.isEmpty else { throw PushRequestError(outcome: "BadChannel", reason: "the FCM registration token is empty") }
        inner["token"] = .string(message.pushChannel)
        inner["topic"] = nil
        inner["condition"] = nil
        object["message"] = .object(inner)
        // Refused just below, as a payload that cannot be written.
        guard let body = try? JSONValue.object(object).encoded() else {
            throw PushRequestError(outcome: "PnsInterfaceError", reason: "the fcmv1 payload cannot be written back as JSON")
        }
        return PushHTTPRequest(
            url: "\(endpoint)/v1/projects/\(projectId)/messages:send",
            headers: [("authorization", accessToken.bearer), ("content-type", "application/json; charset=UTF-8")],
            body: body)
    }

    func classify(_ response: PushHTTPResponse, now: Date) -> PushResult {
        if response.status == 200 { return .delivered }
        let error = response.json?["error"]
        let details = error?["details"]?.arrayValue ?? []
        let code = details.compactMap { $0["errorCode"]?.stringValue }.first ?? error?["status"]?.stringValue
        if let common = common(response, reason: code, now: now) { return common }
        switch (response.status, code) {
        case (_, "UNREGISTERED"), (404, _):
            return .channelExpired(reason: response.describe(code ?? "UNREGISTERED"))
        case (_, "SENDER_ID_MISMATCH"):
            return .failed(outcome: "WrongToken", reason: response.describe(code))
        case (401, _):
            return .renewCredentials(reason: response.describe(code))
        case (403, _):
            return .failed(outcome: "InvalidCredentials", reason: response.describe(code))
        default:
            return .failed(outcome: "PnsInterfaceError", reason: response.describe(code))
        }
    }

    func info(source: String) -> PushServiceInfo {
        var settings = ["projectId": projectId, "clientEmail": clientEmail, "tokenEndpoint": tokenURI]
        settings["privateKeyId"] = privateKeyId
        return PushServiceInfo(
            service: service.rawValue, platform: service.platform.rawValue, endpoint: endpoint, source: source, settings: settings,
            keyFingerprint: nil)
    }
}
