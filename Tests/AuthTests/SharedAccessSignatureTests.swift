import Auth
import Foundation
import Testing

@Suite("Shared access signatures")
struct SharedAccessSignatureTests {
    /// Made with Python's hmac and urllib.parse.quote_plus, as the REST reference's sample does.
    static let reference =
        "SharedAccessSignature sr=http%3A%2F%2F127.0.0.1%3A7780%2Fhub&sig=kqzGIIIBmBO%2FDmFaKP3YFjm7UaCpLnCTqlOd02t8DuQ%3D&se=2000000000&skn=DefaultFullSharedAccessSignature"

    @Test("signing matches an independent implementation byte for byte")
    func knownAnswer() {
        #expect(SharedAccessSignature.sign(
            resource: "http://127.0.0.1:7780/hub", keyName: "DefaultFullSharedAccessSignature", key: "secret",
            expiry: 2_000_000_000) == Self.reference)
        #expect(Crypto.sha256(Data("abc".utf8)).hexString == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("a token parses and verifies; a wrong key does not")
    func verify() throws {
        let token = try SharedAccessSignature(parsing: Self.reference)
        #expect(token.resource == "http://127.0.0.1:7780/hub")
        #expect(token.expiry == 2_000_000_000)
        #expect(token.keyName == "DefaultFullSharedAccessSignature")
        #expect(token.isSigned(with: "secret"))
        #expect(!token.isSigned(with: "Secret"))
    }

    @Test("a .NET-style token with lowercase escapes verifies too")
    func lowercaseEscapes() throws {
        let encoded = "http%3a%2f%2f127.0.0.1%3a7780%2fhub"
        let signature = Crypto.hmacSHA256(key: Data("k".utf8), message: Data("\(encoded)\n2000000000".utf8)).base64EncodedString()
        let token = "SharedAccessSignature sig=\(SharedAccessSignature.urlEncode(signature))&se=2000000000&skn=n&sr=\(encoded)"
        #expect(try SharedAccessSignature(parsing: token).isSigned(with: "k"))
    }

    @Test("scope: a prefix on a path boundary, case-insensitive, scheme-agnostic", arguments: [
        ("http://127.0.0.1:7780/", "http://127.0.0.1:7780/hub/messages", true),
        ("http://127.0.0.1:7780/hub", "http://127.0.0.1:7780/HUB/installations/x", true),
        ("sb://127.0.0.1:7780/hub", "https://127.0.0.1:7780/hub", true),
        ("http://127.0.0.1:7780/hub", "http://127.0.0.1:7780/hub2/messages", false),
        ("http://127.0.0.1:7780/other", "http://127.0.0.1:7780/hub", false),
    ])
    func covers(scope: String, requested: String, expected: Bool) throws {
        let token = SharedAccessSignature.sign(resource: scope, keyName: "n", key: "k", expiry: 2_000_000_000)
        #expect(try SharedAccessSignature(parsing: token).covers(requested) == expected)
    }

    @Test("malformed tokens are refused with the reason", arguments: [
        ("Bearer abc", "must start with"),
        ("SharedAccessSignature sr=x&sig=y&se=1", "no 'skn'"),
        ("SharedAccessSignature sr=x&sig=y&se=soon&skn=n", "seconds since 1970"),
        ("SharedAccessSignature sr=x&sig", "has no '='"),
    ])
    func malformed(token: String, reason: String) {
        do {
            _ = try SharedAccessSignature(parsing: token)
            Issue.record("should be refused")
        } catch {
            #expect(error.message.contains(reason), "\(error.message)")
        }
    }
}

@Suite("Key store")
struct KeyStoreTests {
    func folder() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("nh-keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test("first run makes the two default keys; later runs read the same ones")
    func createOnce() throws {
        let directory = try folder()
        let first = try KeyStore.loadOrCreate(directory: directory)
        #expect(first.keys.map(\.name) == [AccessKey.defaultListenName, AccessKey.defaultFullName])
        #expect(first.key(named: AccessKey.defaultListenName)?.rights == [.listen])
        #expect(first.key(named: AccessKey.defaultFullName)?.rights == .all)
        #expect(Data(base64Encoded: first.keys[0].key)?.count == 32)
        #expect(try KeyStore.loadOrCreate(directory: directory) == first)
        let attributes = try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent("keys.json").path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
    }

    @Test("processes starting at once agree on one key file")
    func race() throws {
        let directory = try folder()
        let stores = (0..<8).map { _ in try? KeyStore.loadOrCreate(directory: directory) }
        #expect(Set(stores.compactMap { $0?.keys.first?.key }).count == 1)
    }

    @Test("authorization: rights, expiry, key name, signature and scope")
    func authorize() throws {
        let store = KeyStore(keys: [
            AccessKey(name: "listen", key: "L", rights: [.listen]), AccessKey(name: "full", key: "F", rights: .all),
        ])
        let hub = "http://127.0.0.1:7780/hub"
        let now = Date(timeIntervalSince1970: 1_900_000_000)
        func token(_ name: String, _ key: String, resource: String = hub, expiry: Int = 2_000_000_000) -> String {
            SharedAccessSignature.sign(resource: resource, keyName: name, key: key, expiry: expiry)
        }
        #expect(try store.authorize(token("full", "F"), resource: hub, needs: .send, now: now).name == "full")
        #expect(try store.authorize(token("listen", "L"), resource: hub, needs: .listen, now: now).name == "listen")
        func failure(_ token: String?, needs: AccessRights = .send) -> AuthError? {
            do {
                _ = try store.authorize(token, resource: hub, needs: needs, now: now)
                return nil
            } catch { return error }
        }
        #expect(failure(token("listen", "L"))?.kind == .forbidden)
        #expect(failure(nil)?.kind == .unauthorized)
        #expect(failure(token("full", "F", expiry: 1_800_000_000))?.message.contains("expired") == true)
        #expect(failure(token("nobody", "F"))?.message.contains("unknown key name") == true)
        #expect(failure(token("full", "wrong"))?.message.contains("signature") == true)
        #expect(failure(token("full", "F", resource: "http://127.0.0.1:7780/other"))?.message.contains("not '") == true)
    }

    @Test("a token checked once is remembered, but only while its key is the same; expiry and rights are checked every time")
    func verifiedTokens() throws {
        var store = KeyStore(keys: [AccessKey(name: "full", key: "F", rights: .all), AccessKey(name: "listen", key: "L", rights: [.listen])])
        let hub = "http://127.0.0.1:7780/hub"
        let token = SharedAccessSignature.sign(resource: hub, keyName: "full", key: "F", expiry: 2_000_000_000)
        let listen = SharedAccessSignature.sign(resource: hub, keyName: "listen", key: "L", expiry: 2_000_000_000)
        let now = Date(timeIntervalSince1970: 1_900_000_000)
        #expect(try store.authorize(token, resource: hub, needs: .manage, now: now).name == "full")
        #expect(try store.authorize(token, resource: hub, needs: .manage, now: now).name == "full")
        _ = try store.authorize(listen, resource: hub, needs: .listen, now: now)
        #expect(throws: AuthError.self) { try store.authorize(listen, resource: hub, needs: .send, now: now) }
        #expect(throws: AuthError.self) {
            try store.authorize(token, resource: hub, needs: .send, now: Date(timeIntervalSince1970: 2_100_000_000))
        }
        #expect(throws: AuthError.self) { try store.authorize(token, resource: "http://127.0.0.1:7780/other", needs: .send, now: now) }
        // The key is replaced: the remembered token no longer passes.
        store.keys[0] = AccessKey(name: "full", key: "G", rights: .all)
        #expect(throws: AuthError.self) { try store.authorize(token, resource: hub, needs: .send, now: now) }
    }

    @Test("connection strings parse, and sb:// becomes https://")
    func connectionStrings() throws {
        let key = AccessKey(name: "DefaultListenSharedAccessSignature", key: "abc=", rights: [.listen])
        let text = key.connectionString(endpoint: "sb://hub.example.org/")
        let parsed = try ConnectionString(parsing: text)
        #expect(parsed.keyName == key.name)
        #expect(parsed.key == "abc=")
        #expect(parsed.httpEndpoint == "https://hub.example.org/")
        #expect(throws: AuthError.self) { try ConnectionString(parsing: "Endpoint=x") }
    }
}
