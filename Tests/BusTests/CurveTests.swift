import Bus
import Foundation
import Testing

@Suite("CURVE")
struct CurveTests {
    @Test("key pairs are 40 Z85 characters and the public key follows from the secret")
    func keys() throws {
        let pair = try CurveKeyPair.generate()
        #expect(pair.publicKey.utf8.count == 40)
        #expect(pair.secretKey.utf8.count == 40)
        #expect(try CurveKeyPair.publicKey(forSecret: pair.secretKey) == pair.publicKey)
        #expect(try CurveKeyPair.generate() != pair)
        #expect(throws: BusError.self) { try CurveKeyPair(publicKey: "short", secretKey: pair.secretKey) }
        #expect(throws: BusError.self) {
            try CurveKeyPair(publicKey: String(repeating: "~", count: 40), secretKey: pair.secretKey)
        }
    }

    @Test("a client that knows the server key talks; one with the wrong key cannot")
    func wrongServerKey() throws {
        let serverKeys = try CurveKeyPair.generate()
        let server = try BackgroundServer(bind: "tcp://127.0.0.1:*", curve: serverKeys) { body, _ in body }
        defer { server.stop() }

        let good = try RequestClient(
            connect: server.endpoint, policy: RetryPolicy(timeout: 2_000, attempts: 1),
            curve: (keys: try CurveKeyPair.generate(), serverPublicKey: serverKeys.publicKey))
        #expect(try good.request([Data("secret".utf8)]) == [Data("secret".utf8)])

        let impostorKey = try CurveKeyPair.generate().publicKey
        let bad = try RequestClient(
            connect: server.endpoint, policy: RetryPolicy(timeout: 300, attempts: 2),
            curve: (keys: try CurveKeyPair.generate(), serverPublicKey: impostorKey))
        #expect(throws: BusError.timeout(endpoint: server.endpoint, attempts: 2)) {
            try bad.request([Data("secret".utf8)])
        }

        let plain = try RequestClient(connect: server.endpoint, policy: RetryPolicy(timeout: 300, attempts: 1))
        #expect(throws: BusError.self) { try plain.request([Data("secret".utf8)]) }
        #expect(server.handled == 1)
    }

    @Test("a CURVE server's size limit is what a client may send: a frame of exactly the limit is read, one byte more is not")
    func limitIsThePlaintext() throws {
        let serverKeys = try CurveKeyPair.generate()
        let server = try BackgroundServer(bind: "tcp://127.0.0.1:*", curve: serverKeys, maxMessageSize: 1_000) { body, _ in [Data("ok".utf8)] }
        defer { server.stop() }
        func client(_ timeout: Int) throws -> RequestClient {
            try RequestClient(
                connect: server.endpoint, policy: RetryPolicy(timeout: timeout, attempts: 1),
                curve: (keys: try CurveKeyPair.generate(), serverPublicKey: serverKeys.publicKey))
        }
        #expect(try client(5_000).request([Data(count: 1_000)]) == [Data("ok".utf8)])
        #expect(throws: BusError.self) { try client(500).request([Data(count: 1_001)]) }
    }
}
