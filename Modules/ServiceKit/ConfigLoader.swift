import Foundation

/// A configuration that cannot be used, with what to fix. Services exit with code 2 on one.
public struct ConfigError: Error, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Builds a `HubConfig` from its defaults, then a JSON file, then `NH_*` environment variables,
/// each overriding the one before. Every leaf field has a variable named after its path:
/// `dataDir` is `NH_DATA_DIR`, `registry.requests` is `NH_REGISTRY_REQUESTS`.
public enum ConfigLoader {
    /// The config file to read: the one named by `--config`, else by `NH_CONFIG` (empty: none),
    /// else, for an installed executable, `installedName` in its config folder when that exists.
    public static func file(
        option: String?, environment: [String: String], installedName: String = "hub.json",
        layout: InstallLayout? = InstallLayout.current
    ) -> String? {
        if let option { return option }
        if let named = environment["NH_CONFIG"] { return named.isEmpty ? nil : named }
        guard let installed = layout?.configFolder.appendingPathComponent(installedName).path,
            FileManager.default.fileExists(atPath: installed)
        else { return nil }
        return installed
    }

    public static func load(file: String?, environment: [String: String]) throws(ConfigError) -> HubConfig {
        var tree = try defaultsTree()
        if let file {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw ConfigError("cannot read config file '\(file)'")
            }
            let parsed: Any
            do {
                parsed = try JSONSerialization.jsonObject(with: data)
            } catch {
                throw ConfigError("config file '\(file)' is not valid JSON: \(error.localizedDescription)")
            }
            guard let overrides = parsed as? [String: Any] else {
                throw ConfigError("config file '\(file)' must hold a JSON object")
            }
            try merge(overrides, into: &tree, path: [], source: "config file '\(file)'")
        }
        try applyEnvironment(environment, to: &tree)
        let config: HubConfig
        do {
            let data = try JSONSerialization.data(withJSONObject: tree)
            config = try JSONDecoder().decode(HubConfig.self, from: data)
        } catch {
            throw ConfigError("config has a value of the wrong type: \(error)")
        }
        try validate(config)
        return config
    }

    /// Every setting with its value, as JSON with sorted keys: the defaults, or `config` as loaded.
    /// Settings without a default are shown as null, so that every key is named.
    public static func describe(_ config: HubConfig) throws(ConfigError) -> String {
        var tree: [String: Any]
        do {
            tree = try JSONSerialization.jsonObject(with: JSONEncoder().encode(config)) as? [String: Any] ?? [:]
        } catch {
            throw ConfigError("cannot encode the config: \(error)")
        }
        func put(_ path: [String], in node: inout [String: Any]) {
            if path.count == 1 {
                if node[path[0]] == nil { node[path[0]] = NSNull() }
                return
            }
            var child = node[path[0]] as? [String: Any] ?? [:]
            put(Array(path.dropFirst()), in: &child)
            node[path[0]] = child
        }
        // Each section's endpoints as its service uses them; each push service as null when not set
        // (deploy/README.md lists their settings).
        let sectionKeys: [String: [String]] = [
            "registry": ["requests", "events"], "publish": ["requests", "events"], "sync": ["requests", "events"],
            "dispatch": ["requests", "agents", "advertise", "peers"], "agent": ["requests"], "gateway": ["requests"],
        ]
        for (section, keys) in sectionKeys {
            for key in keys { put([section, key], in: &tree) }
        }
        for path in leafPaths() where !(path.count == 2 && sectionKeys[path[0]] != nil) { put(path, in: &tree) }
        for path in [["push", "caFile"]] + pushSections.keys.map({ ["push", $0] }) { put(path, in: &tree) }
        guard let data = try? JSONSerialization.data(withJSONObject: tree, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]) else {
            throw ConfigError("cannot write the config as JSON")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// The environment variable for a field path, such as ["registry", "requests"] → NH_REGISTRY_REQUESTS.
    public static func variableName(_ path: [String]) -> String {
        "NH_" + path.map { component in
            var snake = ""
            for character in component {
                if character.isUppercase, !snake.isEmpty { snake += "_" }
                snake += character.uppercased()
            }
            return snake
        }.joined(separator: "_")
    }

    static func defaultsTree() throws(ConfigError) -> [String: Any] {
        do {
            let data = try JSONEncoder().encode(HubConfig())
            return try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
        } catch {
            throw ConfigError("cannot encode the default config: \(error)")
        }
    }

    static func merge(_ overrides: [String: Any], into tree: inout [String: Any], path: [String], source: String) throws(ConfigError) {
        for (key, value) in overrides {
            let here = (path + [key]).joined(separator: ".")
            if let nested = value as? [String: Any] {
                guard var existing = tree[key] as? [String: Any] ?? (isOptionalSection(path + [key]) ? [:] : nil) else {
                    throw ConfigError("\(source): unknown setting '\(here)'; known settings: \(knownSettings())")
                }
                try merge(nested, into: &existing, path: path + [key], source: source)
                tree[key] = existing
            } else {
                guard tree[key] != nil || isOptionalLeaf(path + [key]) else {
                    throw ConfigError("\(source): unknown setting '\(here)'; known settings: \(knownSettings())")
                }
                tree[key] = value
            }
        }
    }

    static func applyEnvironment(_ environment: [String: String], to tree: inout [String: Any]) throws(ConfigError) {
        for path in leafPaths() {
            let name = variableName(path)
            guard let text = environment[name] else { continue }
            let value: Any
            if (path.count == 1 && integerKeys.contains(path[0])) || (path.count == 2 && path[0] == "limits") {
                guard let number = Int(text.trimmingCharacters(in: .whitespaces)) else {
                    throw ConfigError("\(name)='\(text)' must be an integer")
                }
                value = number
            } else {
                value = text
            }
            if path.count == 1 {
                tree[path[0]] = value
            } else {
                var section = tree[path[0]] as? [String: Any] ?? [:]
                section[path[1]] = value
                tree[path[0]] = section
            }
        }
    }

    static let integerKeys: Set<String> = [
        "maxMessageBytes", "requestTimeoutMs", "requestAttempts", "heartbeatMs", "agentHeartbeatMs", "defaultTimeToLive", "userTokenLifetime", "maxRichBytes",
    ]
    static let stringKeys = ["dataDir", "store", "logLevel", "namespace", "hub", "gatewayListen", "gatewayCertificate", "gatewayKey", "webRoot"]
    static let sections = ["registry", "publish", "dispatch", "sync", "agent", "gateway"]
    static let sectionKeys = ["requests", "events", "agents", "advertise", "peers"]

    static let limitKeys = [
        "tagsPerInstallation", "expressionBytes", "requestsPerSecondPerKey", "requestsPerSecondPerHub", "sendsPerSecondPerHub",
        "installationsPerHub", "agentMessagesPerSecond", "agents", "storeBytes",
        "httpThreads", "httpConnections", "httpConnectionsPerAddress", "httpIdleSeconds", "pushesPerSecondPerEndpoint", "jobBatchLines",
    ]

    static func leafPaths() -> [[String]] {
        stringKeys.map { [$0] } + integerKeys.sorted().map { [$0] }
            + sections.flatMap { section in sectionKeys.map { [section, $0] } }
            + limitKeys.map { ["limits", $0] }
    }

    /// The settings of each push service, all optional: `push.apple.keyId` and the like.
    static let pushSections: [String: [String]] = [
        "apple": ["keyFile", "key", "keyId", "teamId", "bundleId", "endpoint"],
        "fcm": ["serviceAccountFile", "serviceAccount", "endpoint"],
        "browser": ["subject", "keyFile"],
        "wns": ["packageSid", "tenantId", "clientId", "secret", "tokenEndpoint"],
        "adm": ["clientId", "clientSecret", "endpoint", "tokenEndpoint"],
        "baidu": ["apiKey", "secretKey", "endpoint"],
    ]

    static func isOptionalSection(_ path: [String]) -> Bool { path.count == 2 && path[0] == "push" && pushSections[path[1]] != nil }
    static func isOptionalLeaf(_ path: [String]) -> Bool {
        (path == ["push", "caFile"]) || (path.count == 2 && path[0] == "push" && pushSections[path[1]] != nil)
            || (path.count == 3 && path[0] == "push" && pushSections[path[1]]?.contains(path[2]) == true)
            || (path.count == 2 && sections.contains(path[0]) && sectionKeys.contains(path[1]))
            || (path.count == 1 && ["store", "gatewayCertificate", "gatewayKey", "webRoot"].contains(path[0]))
    }

    static func knownSettings() -> String {
        (leafPaths() + [["push", "caFile"], ["push", "connectionsPerHost"], ["push", "streamsPerConnection"], ["push", "maxInFlight"],
            ["push", "timeoutMs"], ["push", "stallMs"], ["push", "wnsChannelDomain"]]
            + pushSections.sorted { $0.key < $1.key }.flatMap { section in section.value.map { ["push", section.key, $0] } })
            .map { $0.joined(separator: ".") }.joined(separator: ", ")
    }

    public static func validate(_ config: HubConfig) throws(ConfigError) {
        guard !config.dataDir.isEmpty else { throw ConfigError("dataDir must not be empty") }
        if let store = config.store, store != "sqlite", !config.storeIsPostgres {
            throw ConfigError("store '\(store)' must be sqlite (the default) or a postgresql:// URL, such as postgresql://nh@db.example.org:5432/nh")
        }
        guard Logger.Level(name: config.logLevel) != nil else {
            throw ConfigError(
                "logLevel '\(config.logLevel)' is not one of \(Logger.Level.allCases.map(\.name).joined(separator: ", "))")
        }
        guard config.maxMessageBytes >= 1024 else { throw ConfigError("maxMessageBytes must be at least 1024") }
        guard (1...(256 << 20)).contains(config.maxRichBytes) else { throw ConfigError("maxRichBytes must be 1 byte to 256 MiB") }
        guard config.requestTimeoutMs > 0 else { throw ConfigError("requestTimeoutMs must be positive") }
        guard config.requestAttempts > 0 else { throw ConfigError("requestAttempts must be positive") }
        guard config.heartbeatMs > 0 else { throw ConfigError("heartbeatMs must be positive") }
        guard config.agentHeartbeatMs >= 100 else { throw ConfigError("agentHeartbeatMs must be at least 100") }
        guard (1...2_592_000).contains(config.defaultTimeToLive) else {
            throw ConfigError("defaultTimeToLive must be 1 to 2592000 seconds (30 days)")
        }
        let limits = config.limits
        guard (1...1_000).contains(limits.tagsPerInstallation) else { throw ConfigError("limits.tagsPerInstallation must be 1 to 1000") }
        guard (64...65_536).contains(limits.expressionBytes) else { throw ConfigError("limits.expressionBytes must be 64 to 65536") }
        guard limits.requestsPerSecondPerKey >= 0 else { throw ConfigError("limits.requestsPerSecondPerKey must be 0 (no limit) or more") }
        for (name, value) in [
            ("requestsPerSecondPerHub", limits.requestsPerSecondPerHub), ("sendsPerSecondPerHub", limits.sendsPerSecondPerHub),
            ("installationsPerHub", limits.installationsPerHub),
        ] where value < 0 {
            throw ConfigError("limits.\(name) must be 0 (no limit) or more")
        }
        guard limits.agentMessagesPerSecond >= 1 else { throw ConfigError("limits.agentMessagesPerSecond must be at least 1") }
        guard limits.agents >= 1 else { throw ConfigError("limits.agents must be at least 1") }
        guard (1...100_000).contains(limits.jobBatchLines) else { throw ConfigError("limits.jobBatchLines must be 1 to 100000") }
        guard (1...256).contains(limits.httpThreads) else { throw ConfigError("limits.httpThreads must be 1 to 256") }
        guard limits.httpConnections >= 1, limits.httpConnectionsPerAddress >= 1 else {
            throw ConfigError("limits.httpConnections and limits.httpConnectionsPerAddress must be at least 1")
        }
        guard (1...3_600).contains(limits.httpIdleSeconds) else { throw ConfigError("limits.httpIdleSeconds must be 1 to 3600") }
        guard limits.pushesPerSecondPerEndpoint >= 1 else { throw ConfigError("limits.pushesPerSecondPerEndpoint must be at least 1") }
        guard limits.storeBytes == 0 || limits.storeBytes >= 65_536 else {
            throw ConfigError("limits.storeBytes must be 0 (as much as the disk has) or at least 65536")
        }
        guard (1...64).contains(config.push.connectionsPerHost) else { throw ConfigError("push.connectionsPerHost must be 1 to 64") }
        guard (1...100_000).contains(config.push.maxInFlight) else { throw ConfigError("push.maxInFlight must be 1 to 100000") }
        guard (1...1_000).contains(config.push.streamsPerConnection) else { throw ConfigError("push.streamsPerConnection must be 1 to 1000") }
        guard (1_000...600_000).contains(config.push.timeoutMs) else { throw ConfigError("push.timeoutMs must be 1000 to 600000") }
        guard (1_000...600_000).contains(config.push.stallMs) else { throw ConfigError("push.stallMs must be 1000 to 600000") }
        guard (1...86_400).contains(config.userTokenLifetime) else {
            throw ConfigError("userTokenLifetime must be 1 to 86400 seconds")
        }
        guard config.namespace.hasPrefix("http://") || config.namespace.hasPrefix("https://")
            || config.namespace.hasPrefix("sb://")
        else {
            throw ConfigError("namespace '\(config.namespace)' must be an http://, https:// or sb:// address")
        }
        guard (config.gatewayCertificate == nil) == (config.gatewayKey == nil) else {
            throw ConfigError("give both gatewayCertificate and gatewayKey for HTTPS, or neither")
        }
        let listen = config.gatewayListen.split(separator: ":")
        guard listen.count == 2, let port = Int(listen[1]), (0...65535).contains(port) else {
            throw ConfigError("gatewayListen '\(config.gatewayListen)' must be ADDRESS:PORT, such as 127.0.0.1:7780")
        }
        guard !config.hub.isEmpty, !config.hub.contains("/") else {
            throw ConfigError("hub '\(config.hub)' must be a name without '/'")
        }
        for (service, endpoints) in config.serviceEndpoints {
            let section = String(service.dropFirst("nh-".count))
            for (key, endpoint) in [("requests", endpoints.requests), ("events", endpoints.events)] {
                guard let endpoint else { continue }
                try validateEndpoint(endpoint, of: service, setting: [section, key])
            }
            if let advertise = endpoints.advertise {
                guard service == "nh-dispatch" else { throw ConfigError("\(service): advertise is a dispatcher's setting (dispatch.advertise)") }
                try validateEndpoint(advertise, of: service, setting: [section, "advertise"])
            }
            // Agents may be given several dispatchers, separated by commas; a dispatcher's peers too.
            for endpoint in (endpoints.agents ?? "").split(separator: ",", omittingEmptySubsequences: false).dropFirst(endpoints.agents == nil ? 1 : 0) {
                try validateEndpoint(endpoint.trimmingCharacters(in: .whitespaces), of: service, setting: [section, "agents"], list: true)
            }
            if let peers = endpoints.peers {
                guard service == "nh-dispatch" else { throw ConfigError("\(service): peers is a dispatcher's setting (dispatch.peers)") }
                for endpoint in peers.split(separator: ",", omittingEmptySubsequences: false) {
                    try validateEndpoint(endpoint.trimmingCharacters(in: .whitespaces), of: service, setting: [section, "peers"], list: true)
                }
            }
        }
    }

    /// One ZeroMQ endpoint of `setting` (such as ["dispatch", "requests"]), named in the refusal with
    /// its environment variable. Only a list setting (dispatch.agents) is split at commas first.
    static func validateEndpoint(_ endpoint: String, of service: String, setting: [String], list: Bool = false) throws(ConfigError) {
        let name = "\(setting.joined(separator: ".")) (\(variableName(setting)))"
        if endpoint.contains(",") || endpoint.contains(where: \.isWhitespace) {
            throw ConfigError(
                "\(name) '\(endpoint)' is \(list ? "not one endpoint" : "a list"): it takes one endpoint, such as tcp://HOST:PORT"
                    + (list ? "" : "; only dispatch.agents and dispatch.peers take several, separated by commas"))
        }
        let schemes = ["tcp://", "ipc://", "inproc://"]
        guard let scheme = schemes.first(where: { endpoint.hasPrefix($0) }) else {
            throw ConfigError("\(name): \(service) endpoint '\(endpoint)' must start with tcp://, ipc:// or inproc://")
        }
        let rest = endpoint.dropFirst(scheme.count)
        guard !rest.isEmpty else { throw ConfigError("\(name): \(service) endpoint '\(endpoint)' has no address") }
        if scheme == "tcp://" {
            guard let colon = rest.lastIndex(of: ":"), let port = Int(rest[rest.index(after: colon)...]),
                (0...65535).contains(port)
            else {
                throw ConfigError("\(name): \(service) endpoint '\(endpoint)' needs a port: tcp://HOST:PORT")
            }
        }
    }
}
