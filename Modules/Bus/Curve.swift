import CLibZMQ
import Foundation

/// A CURVE key pair in Z85 text, 40 characters each.
public struct CurveKeyPair: Sendable, Equatable, Codable {
    public let publicKey: String
    public let secretKey: String

    public init(publicKey: String, secretKey: String) throws(BusError) {
        try CurveKeyPair.validate(publicKey, "public key")
        try CurveKeyPair.validate(secretKey, "secret key")
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// Whether `key` is a CURVE key in Z85 text, as an agent's public key is.
    public static func isValidKey(_ key: String) -> Bool {
        // A predicate: the failure is the answer.
        (try? validate(key, "key")) != nil
    }

    /// A fresh random key pair.
    public static func generate() throws(ZMQError) -> CurveKeyPair {
        var publicKey = [CChar](repeating: 0, count: 41)
        var secretKey = [CChar](repeating: 0, count: 41)
        try zmqCheck("zmq_curve_keypair") { zmq_curve_keypair(&publicKey, &secretKey) }
        return CurveKeyPair(unchecked: z85String(publicKey), secret: z85String(secretKey))
    }

    /// The public key that belongs to a secret key.
    public static func publicKey(forSecret secretKey: String) throws(BusError) -> String {
        try validate(secretKey, "secret key")
        var publicKey = [CChar](repeating: 0, count: 41)
        guard zmq_curve_public(&publicKey, secretKey) == 0 else {
            throw BusError.invalidKey("secret key is not valid Z85")
        }
        return z85String(publicKey)
    }

    private init(unchecked publicKey: String, secret: String) {
        self.publicKey = publicKey
        self.secretKey = secret
    }

    private static func z85String(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func validate(_ key: String, _ what: String) throws(BusError) {
        guard key.utf8.count == 40 else {
            throw BusError.invalidKey("\(what) must be 40 Z85 characters, got \(key.utf8.count)")
        }
        var decoded = [UInt8](repeating: 0, count: 32)
        guard zmq_z85_decode(&decoded, key) != nil else {
            throw BusError.invalidKey("\(what) is not valid Z85")
        }
    }
}

extension ZMQSocket {
    /// Makes this socket a CURVE server: peers must know `keys.publicKey` to connect. With a ZAP
    /// handler in the context, each peer's key is then checked by the handler's policy for `domain`.
    public func makeCurveServer(_ keys: CurveKeyPair, domain: String = ZAPHandler.busDomain) throws(ZMQError) {
        try setOption(ZMQ_ZAP_DOMAIN, name: "ZMQ_ZAP_DOMAIN", Array(domain.utf8))
        try setOption(ZMQ_CURVE_SERVER, name: "ZMQ_CURVE_SERVER", Int32(1))
        try setOption(ZMQ_CURVE_SECRETKEY, name: "ZMQ_CURVE_SECRETKEY", Array(keys.secretKey.utf8) + [0])
    }

    /// Makes this socket a CURVE client of the server whose public key is `serverPublicKey`.
    public func makeCurveClient(_ keys: CurveKeyPair, serverPublicKey: String) throws(ZMQError) {
        try setOption(ZMQ_CURVE_SERVERKEY, name: "ZMQ_CURVE_SERVERKEY", Array(serverPublicKey.utf8) + [0])
        try setOption(ZMQ_CURVE_PUBLICKEY, name: "ZMQ_CURVE_PUBLICKEY", Array(keys.publicKey.utf8) + [0])
        try setOption(ZMQ_CURVE_SECRETKEY, name: "ZMQ_CURVE_SECRETKEY", Array(keys.secretKey.utf8) + [0])
    }
}
