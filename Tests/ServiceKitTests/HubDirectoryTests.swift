import Auth
import Foundation
import HubProtocol
import ServiceKit
import Testing

/// What a service checks credentials against: each hub's keys, as the catalog has them.
@Suite("Hub directory")
struct HubDirectoryTests {
    static let fileKeys = KeyStore(keys: KeyStore.defaultHubKeys())
    static let namespaceKeys = KeyStore(keys: [AccessKey.generate(name: AccessKey.rootManageName, rights: .all)])

    static func policy(_ key: AccessKey) -> HubPolicy {
        HubPolicy(name: key.name, rights: key.rights.names, key: key.key, secondaryKey: key.secondaryKey)
    }

    @Test("before the catalog is read only the default hub is served; after, each hub with its own keys and the namespace's")
    func hubs() throws {
        let directory = HubDirectory(defaultHub: "hub", fileKeys: Self.fileKeys, namespaceKeys: Self.namespaceKeys)
        let home = HubScope(hub: nil, defaultHub: "hub"), news = HubScope(hub: "news", defaultHub: "hub")
        #expect(try directory.keys(for: home).keys.map(\.name) == [AccessKey.defaultListenName, AccessKey.defaultFullName, AccessKey.rootManageName])
        #expect {
            try directory.keys(for: news)
        } throws: { ($0 as? HubError)?.code == .unavailable }
        let newsKeys = KeyStore.defaultHubKeys()
        #expect(directory.apply(HubCatalog(version: 1, hubs: [HubDescription(name: "News", createdAt: Date(), policies: newsKeys.map(Self.policy))])))
        #expect(!directory.apply(HubCatalog(version: 1, hubs: nil)))
        #expect(try directory.keys(for: news).key(named: AccessKey.defaultFullName)?.key == newsKeys[1].key)
        #expect(try directory.keys(for: news).key(named: AccessKey.rootManageName) != nil)
        #expect {
            try directory.keys(for: HubScope(hub: "other", defaultHub: "hub"))
        } throws: { ($0 as? HubError)?.code == .notFound }
        #expect(directory.has(news) && directory.has(home) && directory.busKeys.count == 4)
        // A token of the news hub's full key, with either of its keys; not for the default hub.
        for secret in newsKeys[1].signingKeys {
            let token = SharedAccessSignature.sign(resource: "http://h/news", keyName: AccessKey.defaultFullName, key: secret, expiry: Int(Date().timeIntervalSince1970) + 60)
            #expect(try directory.keys(for: news).authorize(token, resource: "http://h/news", needs: .send).name == AccessKey.defaultFullName)
            #expect(throws: AuthError.self) { try directory.keys(for: home).authorize(token, resource: "http://h/hub", needs: .send) }
        }
        // A hub gone from the catalog is gone here.
        #expect(directory.apply(HubCatalog(version: 2, hubs: [])))
        #expect(!directory.has(news))
    }
}
