import Foundation
import HubProtocol
import ServiceKit

/// nhctl pns: the push services the dispatcher delivers to. Keys are read here and sent as their
/// text; `show` never prints a secret, only what identifies it.
enum CtlPush {
    static let usage = """
        usage: nhctl pns show
               nhctl pns set apple --key-file AuthKey_KEYID.p8 --key-id KEYID --team-id TEAMID --bundle-id ID [--endpoint production|sandbox|URL]
               nhctl pns set fcm --service-account FILE.json [--endpoint URL]
               nhctl pns set browser --subject mailto:ADDRESS
               nhctl pns set wns (--package-sid ms-app://S-1-15-2-… | --tenant-id TENANT --client-id CLIENT) --secret-file FILE [--token-endpoint URL]
               nhctl pns set adm --client-id amzn1.application-oa2-client.… --secret-file FILE [--endpoint URL] [--token-endpoint URL]
               nhctl pns set baidu --api-key KEY --secret-file FILE [--endpoint URL]
               nhctl pns remove apple|fcm|browser|wns|adm|baidu
          A secret is read from its file (- for standard input), never from the command line, where
          other users of the host would see it.
        """

    static func run(_ parsed: Arguments, config: HubConfig, environment: [String: String]) -> Int32 {
        let words = Array(parsed.positionals.dropFirst())
        let request: PushCredentialsSetRequest?
        do {
            switch (words.first, words.count) {
            case ("show", 1):
                request = nil
            case ("set", 2):
                request = try setRequest(words[1], parsed)
            case ("remove", 2):
                guard PushServiceName.all.contains(words[1]) else { return Ctl.fail("'\(words[1])' is not a push service\n\(usage)") }
                request = PushCredentialsSetRequest(remove: [words[1]])
            default:
                return Ctl.fail(usage)
            }
        } catch {
            return Ctl.fail("\(error)")
        }
        do {
            let dispatch = try CtlCaller(parsed, config: config, environment: environment).client(config.dispatch.requests)
            defer { dispatch.close() }
            let reply = try request.map { try dispatch.call($0) } ?? dispatch.call(PushCredentialsRequest())
            if parsed.has("json") {
                for service in reply.services { print(String(decoding: try HubCodec.makeEncoder().encode(service), as: UTF8.self)) }
            } else if reply.services.isEmpty {
                print("no push services: only Linux agents are delivered to (nhctl pns set \(PushServiceName.all.joined(separator: "|")) …)")
            } else {
                for service in reply.services {
                    var line = "\(service.service)  \(service.platform)  \(service.endpoint)  (\(service.source))"
                    for (name, value) in service.settings.sorted(by: { $0.key < $1.key }) { line += "  \(name)=\(value)" }
                    if let fingerprint = service.keyFingerprint { line += "  key sha256:\(fingerprint.prefix(16))" }
                    if let key = service.publicKey { line += "  applicationServerKey=\(key)" }
                    print(line)
                }
            }
            return 0
        } catch {
            return CtlSend.report(error)
        }
    }

    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    static func setRequest(_ service: String, _ parsed: Arguments) throws -> PushCredentialsSetRequest {
        func required(_ name: String) throws -> String {
            guard let value = parsed[option: name], !value.isEmpty else {
                throw UsageError(description: "nhctl pns set \(service) needs --\(name)\n\(usage)")
            }
            return value
        }
        func read(_ path: String) throws -> String {
            let data = path == "-" ? FileHandle.standardInput.readDataToEndOfFile() : FileManager.default.contents(atPath: path)
            guard let data else { throw UsageError(description: "cannot read '\(path)'") }
            return String(decoding: data, as: UTF8.self)
        }
        /// A secret from its file, without the line end an editor or echo leaves.
        func secret() throws -> String {
            let text = try read(try required("secret-file")).trimmingCharacters(in: .whitespacesAndNewlines)
            guard !text.isEmpty else { throw UsageError(description: "the secret file is empty") }
            return text
        }
        switch service {
        case "apple":
            return PushCredentialsSetRequest(apple: AppleSettings(
                key: try read(try required("key-file")), keyId: try required("key-id"), teamId: try required("team-id"),
                bundleId: try required("bundle-id"), endpoint: parsed[option: "endpoint"] ?? "production"))
        case "fcm":
            return PushCredentialsSetRequest(fcm: FCMSettings(
                serviceAccount: try read(try required("service-account")), endpoint: parsed[option: "endpoint"] ?? "https://fcm.googleapis.com"))
        case "browser":
            return PushCredentialsSetRequest(browser: WebPushSettings(subject: try required("subject")))
        case "wns":
            return PushCredentialsSetRequest(wns: WNSSettings(
                packageSid: parsed[option: "package-sid"], tenantId: parsed[option: "tenant-id"], clientId: parsed[option: "client-id"],
                secret: try secret(), tokenEndpoint: parsed[option: "token-endpoint"]))
        case "adm":
            return PushCredentialsSetRequest(adm: ADMSettings(
                clientId: try required("client-id"), clientSecret: try secret(), endpoint: parsed[option: "endpoint"],
                tokenEndpoint: parsed[option: "token-endpoint"]))
        case "baidu":
            return PushCredentialsSetRequest(baidu: BaiduSettings(apiKey: try required("api-key"), secretKey: try secret(), endpoint: parsed[option: "endpoint"]))
        default:
            throw UsageError(description: "'\(service)' is not a push service\n\(usage)")
        }
    }
}
