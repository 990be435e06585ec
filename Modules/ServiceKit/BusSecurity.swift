import Auth
import Bus
import Foundation
import Synchronization

/// The hub's CURVE key pair, in `bus.key` in the data folder, made on first run: every bound
/// socket of every service (ROUTER and PUB, the dispatcher's agent socket included) is a CURVE
/// server with it. Clients need only its public key: `NH_BUS_SERVER_KEY`, or, on a host that
/// runs the services, the file itself (`nhctl keys` prints it).
public enum BusKeys {
    public static let fileName = "bus.key"
    public static let environmentVariable = "NH_BUS_SERVER_KEY"

    struct File: Codable {
        var publicKey: String
        var secretKey: String
    }

    public static func loadOrCreate(directory: URL) throws -> CurveKeyPair {
        let url = directory.appendingPathComponent(fileName)
        let data = try SecretFile.loadOrCreate(url) {
            let pair = try CurveKeyPair.generate()
            return try JSONEncoder().encode(File(publicKey: pair.publicKey, secretKey: pair.secretKey))
        }
        do {
            let file = try JSONDecoder().decode(File.self, from: data)
            return try CurveKeyPair(publicKey: file.publicKey, secretKey: file.secretKey)
        } catch {
            throw AuthError(.unauthorized, "\(url.path) is not a valid bus key file (\(error)); restore it from another host of this hub")
        }
    }

    /// The hub's public key from the data folder, if the file is there.
    public static func publicKey(directory: URL) -> String? {
        // Absent until the services have written a whole key file; callers wait for it or say it is missing.
        guard let data = FileManager.default.contents(atPath: directory.appendingPathComponent(fileName).path),
            let file = try? JSONDecoder().decode(File.self, from: data)
        else { return nil }
        return file.publicKey
    }

    /// The file in an agent's home that holds its device public key, which serves the agent's
    /// control socket; local tools read it to connect.
    public static let deviceFileName = "device.pub"

    public static func writeDeviceKey(_ publicKey: String, agentHome: URL) throws {
        try Data((publicKey + "\n").utf8).write(to: agentHome.appendingPathComponent(deviceFileName))
    }

    /// The device public key of the agent whose home is `agentHome`, if it has run.
    public static func deviceKey(agentHome: URL) -> String? {
        // Absent until the agent has run and written it.
        guard let text = try? String(contentsOf: agentHome.appendingPathComponent(deviceFileName), encoding: .utf8) else { return nil }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The hub's public key for a client: `NH_BUS_SERVER_KEY`, or the key file in the data folder,
    /// waited for up to `wait` seconds since the services may be starting.
    public static func serverPublicKey(config: HubConfig, environment: [String: String], wait: TimeInterval = 0) throws -> String {
        if let key = environment[environmentVariable] {
            guard CurveKeyPair.isValidKey(key) else {
                throw ConfigError("\(environmentVariable) must be the hub's 40-character CURVE public key, as `nhctl keys` prints it")
            }
            return key
        }
        let directory = URL(fileURLWithPath: config.dataDir, isDirectory: true)
        let deadline = Date().addingTimeInterval(wait)
        repeat {
            if let key = publicKey(directory: directory) { return key }
            if wait > 0 { Thread.sleep(forTimeInterval: 0.1) }
        } while Date() < deadline
        throw ConfigError(
            "no hub bus key: set \(environmentVariable) to the public key in the hub's \(fileName) (nhctl keys prints it), or run on a host with the hub's data folder")
    }
}

/// How a process's bus sockets are secured. Every socket it binds is a CURVE server with
/// `serverKeys` whose ZAP handler admits only `admitted` client keys (and, on the agent socket, the
/// agents' own keys, which the dispatcher checks at hello). Every socket it connects is a CURVE
/// client with `clientKeys`, to a server with `serverPublicKey`.
///
/// A client's key pair is derived from the access key it holds (`clientKeys(keyName:key:)`), so
/// whoever holds a connection string of the hub can reach the bus, nobody else can, and the
/// services know every admitted key from `keys.json` alone: no second list to keep in step.
public struct BusSecurity: Sendable {
    public var serverKeys: CurveKeyPair?
    public var clientKeys: CurveKeyPair
    public var serverPublicKey: String
    public var admitted: Set<String>
    /// The client keys of the policies the hub catalog holds (the namespace's other hubs, and the
    /// default hub's once changed there), as the catalog was last read.
    public var hubKeys: Set<String> = []

    public init(serverKeys: CurveKeyPair?, clientKeys: CurveKeyPair, serverPublicKey: String, admitted: Set<String>) {
        self.serverKeys = serverKeys
        self.clientKeys = clientKeys
        self.serverPublicKey = serverPublicKey
        self.admitted = admitted
    }

    /// What a client socket needs.
    public var client: (keys: CurveKeyPair, serverPublicKey: String) { (clientKeys, serverPublicKey) }

    /// The bus key pair of the holder of an access key: its secret is HMAC-SHA256 of the key's
    /// name under the key, so it changes when the key is rotated.
    public static func clientKeys(keyName: String, key: String) throws -> CurveKeyPair {
        let secret = Crypto.hmacSHA256(key: Data(key.utf8), message: Data("nh-bus-client-v1\n\(keyName)".utf8))
        guard let text = ZAPHandler.z85(secret) else { throw BusError.invalidKey("cannot encode a derived key") }
        return try CurveKeyPair(publicKey: CurveKeyPair.publicKey(forSecret: text), secretKey: text)
    }

    public static func clientKeys(for credential: ConnectionString) throws -> CurveKeyPair {
        try clientKeys(keyName: credential.keyName, key: credential.key)
    }

    /// The client keys of every access key in `keys`, primary and secondary.
    public static func admitted(by keys: [AccessKey]) throws -> Set<String> {
        Set(try keys.flatMap { policy in try policy.signingKeys.map { try clientKeys(keyName: policy.name, key: $0).publicKey } })
    }

    /// Who may connect to a socket of `domain`: the admitted client keys on the bus; on the agent
    /// socket any key, since a hello is accepted only for an installation bound to the key.
    public func admits(domain: String, key: String) -> Bool {
        domain == ZAPHandler.agentDomain || admitted.contains(key) || hubKeys.contains(key)
    }
}

/// A process's bus security as its ZAP handler's thread reads it: set at start, read at each handshake.
final class BusAdmission: Sendable {
    private let security = Mutex<BusSecurity?>(nil)

    func set(_ value: BusSecurity) { security.withLock { $0 = value } }

    /// Admits the client keys of the namespace's other hubs as well, as the hub catalog has them now.
    func setHubKeys(_ keys: Set<String>) { security.withLock { $0?.hubKeys = keys } }

    /// Whether a client key may connect to a socket of `domain`; nobody before the bus is secured.
    func admits(domain: String, key: String) -> Bool {
        security.withLock { $0?.admits(domain: domain, key: key) ?? false }
    }
}
