import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit

/// nhctl's sending side: send, outcome, keys.
enum CtlSend {
    /// The credential for backend calls: a connection string, or on a host with the data folder the
    /// namespace's root key (which reaches every hub and manages hubs), else the default hub's full key.
    static func credential(_ parsed: Arguments, config: HubConfig, environment: [String: String]) throws -> ConnectionString {
        if let text = parsed[option: "connection-string"] ?? environment["NH_CONNECTION_STRING"] {
            return try ConnectionString(parsing: text)
        }
        // A client never writes a key file: the services make the keys, in their data folder.
        let folder = URL(fileURLWithPath: config.dataDir, isDirectory: true)
        if let root = try KeyStore.load(directory: folder, fileName: KeyStore.namespaceFileName)?.key(named: AccessKey.rootManageName) {
            return ConnectionString(endpoint: config.namespace, keyName: root.name, key: root.key)
        }
        let file = folder.appendingPathComponent(KeyStore.fileName).path
        guard let keys = try KeyStore.load(directory: folder) else {
            if FileManager.default.fileExists(atPath: file) {
                throw HubError(.unauthorized, "cannot read \(file): run nhctl as a user who may read the hub's keys, or pass --connection-string")
            }
            throw HubError(.unauthorized, """
                no hub keys in \(config.dataDir): nhctl signs with the keys the services keep in their data folder; \
                set NH_DATA_DIR to that folder (make run keeps it in ./data), or pass --connection-string (nhctl keys prints them where the hub runs)
                """)
        }
        guard let key = keys.key(named: AccessKey.defaultFullName) else {
            throw HubError(.unauthorized, "no \(AccessKey.defaultFullName) in \(config.dataDir)/keys.json; pass --connection-string")
        }
        return ConnectionString(endpoint: config.namespace, keyName: key.name, key: key.key)
    }


    /// A rich send: the file's bytes are stored by the hub and the targets get a silent notification.
    static func sendRich(_ parsed: Arguments, file: String, config: HubConfig, environment: [String: String]) -> Int32 {
        guard let data = FileManager.default.contents(atPath: file) else { return Ctl.fail("cannot read '\(file)'") }
        guard let message = parsed[option: "message"] else { return Ctl.fail("a rich send needs --message, the text shown with it") }
        let request = SendRichNotification(
            idempotencyKey: parsed[option: "idempotency-key"] ?? UUID().uuidString, message: message,
            richType: parsed[option: "rich-type"] ?? "file", contentType: parsed[option: "content-type"] ?? "application/octet-stream",
            payload: data, sha256: Crypto.sha256(data).hexString, tagExpression: parsed[option: "tag"],
            installationId: parsed[option: "installation"], userId: parsed[option: "user"], timeToLive: parsed[option: "ttl"].flatMap(Int.init),
            keyId: parsed[option: "encrypted-for"])
        do {
            let client = try CtlCaller(parsed, config: config, environment: environment).client(config.publish.requests)
            defer { client.close() }
            let accepted = try client.call(request)
            print(parsed.has("json")
                ? #"{"notificationId":"\#(accepted.notificationId)","richId":"\#(accepted.richId)"}"#
                : "accepted \(accepted.notificationId), rich payload \(accepted.richId)")
            return 0
        } catch {
            return report(error)
        }
    }

    /// Template properties from `NAME=VALUE` arguments. The value may be empty or hold more `=`;
    /// an argument with no `=` or with an empty NAME is refused, named in the error.
    static func properties(_ items: some Sequence<String>) throws(Arguments.Error) -> [String: String] {
        var properties: [String: String] = [:]
        for item in items {
            guard let equals = item.firstIndex(of: "=") else {
                throw Arguments.Error(description: "'\(item)' is not NAME=VALUE; template properties are given as messageParam=\"Hello\"")
            }
            guard equals > item.startIndex else {
                throw Arguments.Error(description: "'\(item)' has an empty property name; template properties are given as messageParam=\"Hello\"")
            }
            properties[String(item[..<equals])] = String(item[item.index(after: equals)...])
        }
        return properties
    }

    static func send(_ parsed: Arguments, config: HubConfig, environment: [String: String]) -> Int32 {
        if let file = parsed[option: "rich"] { return sendRich(parsed, file: file, config: config, environment: environment) }
        let properties: [String: String]
        do {
            properties = try Self.properties(parsed.positionals.dropFirst())
        } catch {
            return Ctl.fail(error.description)
        }
        let native = parsed[option: "native"]
        if native != nil && !properties.isEmpty { return Ctl.fail("give either --native JSON or NAME=VALUE properties, not both") }
        if native == nil && properties.isEmpty { return Ctl.fail("nothing to send: give NAME=VALUE properties or --native JSON") }
        var ttl: Int?
        if let text = parsed[option: "ttl"] {
            guard let value = Int(text) else { return Ctl.fail("--ttl must be a number of seconds") }
            ttl = value
        }
        var scheduledAt: Date?
        if let text = parsed[option: "schedule"] {
            guard let date = WireDate.parse(text) else { return Ctl.fail("--schedule must be an ISO 8601 time such as 2026-01-31T12:00:00Z") }
            scheduledAt = date
        }
        var platform: Platform?
        if let name = parsed[option: "platform"] {
            guard let named = Platform(name: name) ?? Platform(format: name) else {
                return Ctl.fail("--platform '\(name)' is not one of \(Platform.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard native != nil else { return Ctl.fail("--platform goes with --native: a template send reaches every platform's templates") }
            platform = named == .linux ? nil : named
        }
        var headers: [String: String]?
        if let text = parsed[option: "headers"] {
            headers = [:]
            for item in text.split(separator: ";") {
                guard let equals = item.firstIndex(of: "="), equals != item.startIndex else {
                    return Ctl.fail("--headers takes NAME=VALUE pairs joined by ;, such as 'apns-push-type=alert;apns-priority=10'")
                }
                headers![item[..<equals].trimmingCharacters(in: .whitespaces).lowercased()] = String(item[item.index(after: equals)...])
            }
        }
        var request = SendNotification(
            idempotencyKey: parsed[option: "idempotency-key"] ?? UUID().uuidString, format: native == nil ? .template : .native,
            body: native, properties: native == nil ? properties : nil, tagExpression: parsed[option: "tag"],
            installationId: parsed[option: "installation"] ?? parsed[option: "direct"], userId: parsed[option: "user"],
            timeToLive: ttl, scheduledAt: scheduledAt, platform: platform, headers: headers)
        if parsed.has("test") { request.test = true }
        do {
            let caller = try CtlCaller(parsed, config: config, environment: environment)
            let client = try caller.client(config.publish.requests)
            defer { client.close() }
            let accepted = try client.call(request)
            if parsed.has("test") {
                let dispatchers = try caller.outcomeReader()
                defer { dispatchers.close() }
                let (outcome, results) = OutcomeLookup.waitForTest(accepted.notificationId, dispatch: dispatchers.reader, publish: client, seconds: 10)
                return printTest(accepted.notificationId, outcome, results, json: parsed.has("json"))
            }
            if parsed.has("json") {
                print(#"{"notificationId":"\#(accepted.notificationId)","state":"\#(accepted.state.rawValue)"}"#)
            } else {
                print("accepted \(accepted.notificationId) (\(accepted.state.rawValue))")
            }
            return 0
        } catch {
            return report(error)
        }
    }

    /// A test send's results: one line per target of the first 10, and the totals.
    static func printTest(_ id: String, _ outcome: NotificationOutcome?, _ results: [TestResult], json: Bool) -> Int32 {
        let success = outcome?.acknowledged ?? 0
        let failure = (outcome?.targets ?? 0) - success
        if json {
            let encoder = HubCodec.makeEncoder()
            // Results of strings always encode.
            let list = (try? encoder.encode(results)).map { String(decoding: $0, as: UTF8.self) } ?? "[]"
            print(#"{"notificationId":"\#(id)","state":"\#(outcome?.state.rawValue ?? "Unknown")","success":\#(success),"failure":\#(failure),"results":\#(list)}"#)
        } else {
            print("\(id): \(outcome?.state.rawValue ?? "Unknown"), \(success) succeeded, \(failure) did not")
            for result in results {
                print("  \(result.installationId)  \(result.platform)  \(result.outcome ?? "no answer yet")")
            }
        }
        return 0
    }

    static func cancel(_ parsed: Arguments, config: HubConfig, environment: [String: String]) -> Int32 {
        guard parsed.positionals.count == 2 else { return Ctl.fail("usage: nhctl cancel NOTIFICATION_ID") }
        do {
            let publish = try CtlCaller(parsed, config: config, environment: environment).client(config.publish.requests)
            defer { publish.close() }
            _ = try publish.call(CancelScheduledNotification(notificationId: parsed.positionals[1]))
            print(parsed.has("json") ? #"{"canceled":"\#(parsed.positionals[1])"}"# : "canceled \(parsed.positionals[1])")
            return 0
        } catch {
            return report(error)
        }
    }

    static func outcome(_ parsed: Arguments, config: HubConfig, environment: [String: String]) -> Int32 {
        guard parsed.positionals.count == 2 else { return Ctl.fail("usage: nhctl outcome NOTIFICATION_ID") }
        let id = parsed.positionals[1]
        do {
            let caller = try CtlCaller(parsed, config: config, environment: environment)
            let dispatchers = try caller.outcomeReader()
            let publish = try caller.client(config.publish.requests)
            defer {
                dispatchers.close()
                publish.close()
            }
            let outcome = try OutcomeLookup.find(id, dispatch: dispatchers.reader, publish: publish)
            if parsed.has("json") {
                let encoder = HubCodec.makeEncoder()
                print(String(decoding: try encoder.encode(outcome), as: UTF8.self))
            } else {
                print("""
                    \(outcome.notificationId): \(outcome.state.rawValue)
                      targets \(outcome.targets), delivered \(outcome.delivered), acknowledged \(outcome.acknowledged), expired \(outcome.expired), failed \(outcome.failed)
                      enqueued \(WireDate.format(outcome.enqueuedAt))\(outcome.endedAt.map { ", processed \(WireDate.format($0))" } ?? "")
                    """)
                for (platform, counts) in (outcome.platforms ?? [:]).sorted(by: { $0.key < $1.key }) {
                    print("  \(platform): " + counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
                }
            }
            return 0
        } catch {
            return report(error)
        }
    }

    /// The default hub's connection strings (`keys.json`) and the namespace's (`namespace-keys.json`),
    /// read from the data folder; `nhctl hub keys NAME` asks the registry for any hub's.
    static func keys(config: HubConfig, json: Bool) -> Int32 {
        do {
            let folder = URL(fileURLWithPath: config.dataDir, isDirectory: true)
            guard let keys = try KeyStore.load(directory: folder) else {
                throw HubError(.unauthorized, "no keys.json in \(config.dataDir): set NH_DATA_DIR to the services' data folder (make run keeps it in ./data)")
            }
            for key in keys.keys {
                let text = key.connectionString(endpoint: config.namespace)
                print(json ? #"{"name":"\#(key.name)","rights":"\#(key.rights)","connectionString":"\#(text)"}"# : "\(key.name) (\(key.rights)):\n  \(text)")
            }
            for key in try KeyStore.load(directory: folder, fileName: KeyStore.namespaceFileName)?.keys ?? [] {
                let text = key.connectionString(endpoint: config.namespace)
                print(json
                    ? #"{"name":"\#(key.name)","rights":"\#(key.rights)","namespace":true,"connectionString":"\#(text)"}"#
                    : "\(key.name) (namespace, \(key.rights): makes hubs and reaches every hub):\n  \(text)")
            }
            if let serverKey = BusKeys.publicKey(directory: URL(fileURLWithPath: config.dataDir, isDirectory: true)) {
                print(json ? #"{"name":"bus","serverKey":"\#(serverKey)"}"# : "Bus key (\(BusKeys.environmentVariable) for agents and nhctl on other hosts):\n  \(serverKey)")
            }
            return 0
        } catch {
            return report(error)
        }
    }

    static func report(_ error: Error) -> Int32 {
        if let error = error as? HubError {
            FileHandle.standardError.write(Data("nhctl: \(error.code.rawValue): \(error.message)\n".utf8))
            return 1
        }
        FileHandle.standardError.write(Data("nhctl: \(error)\n".utf8))
        return 1
    }
}
