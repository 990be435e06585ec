import Auth
import Bus
import Foundation

/// The CURVE key pair of the dispatcher's agent socket, in `agent-channel.key` in the data folder,
/// made on first run. Agents need only its public key: `NH_AGENT_SERVER_KEY`, or, on a host that
/// runs the services, the file itself.
public enum AgentChannelKeys {
    public static let fileName = "agent-channel.key"

    struct File: Codable {
        var publicKey: String
        var secretKey: String
    }

    public static func loadOrCreate(directory: URL) throws -> CurveKeyPair {
        let data = try SecretFile.loadOrCreate(directory.appendingPathComponent(fileName)) {
            let pair = try CurveKeyPair.generate()
            return try JSONEncoder().encode(File(publicKey: pair.publicKey, secretKey: pair.secretKey))
        }
        let file = try JSONDecoder().decode(File.self, from: data)
        return try CurveKeyPair(publicKey: file.publicKey, secretKey: file.secretKey)
    }

    /// The server's public key from the data folder, if the file is there.
    public static func publicKey(directory: URL) -> String? {
        guard let data = FileManager.default.contents(atPath: directory.appendingPathComponent(fileName).path),
            let file = try? JSONDecoder().decode(File.self, from: data)
        else { return nil }
        return file.publicKey
    }
}
