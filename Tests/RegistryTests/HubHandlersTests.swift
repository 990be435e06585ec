import Auth
import Foundation
import HubProtocol
import ServiceKit
import TestSupport
import Testing

@testable import NHRegistry

/// The namespace's hubs as the registry keeps them: made, listed, rotated and deleted with a
/// namespace key alone; and one hub's installations sealed from another's, though their ids match.
@Suite("Hub handlers")
final class HubHandlersTests {
    let harness: ServiceHarness
    let store: any InstallationStore
    let hubs: HubHandlers
    let installations: RegistryHandlers

    init() throws {
        harness = try ServiceHarness(service: "nh-registry")
        store = try StoreEngine.sqlite.makeStore()
        hubs = HubHandlers(context: harness.context, store: store, publishChanges: {})
        installations = RegistryHandlers(context: harness.context, store: store, publishChanges: {})
        try hubs.refresh()
    }

    var context: ServiceContext { harness.context }
    var root: String { harness.root }
    func envelope<R: HubRequest>(_ payload: R, auth: String?, hub: String? = nil) -> Envelope<R> {
        Envelope(id: "1", auth: auth, hub: hub, payload: payload)
    }
    func code(_ body: () throws -> Any) -> ErrorCode? { harness.code(body) }

    /// A token of `hub`'s policy `name`, signed with its primary key (or its secondary).
    func token(_ hub: HubDescription, _ name: String, secondary: Bool = false) -> String {
        let policy = hub.policies.first { $0.name == name }!
        let key = AccessKey(name: name, key: secondary ? policy.secondaryKey! : policy.key, rights: .all)
        return context.token(for: key, hub: hub.name)
    }

    func upsert(_ id: String, tags: [String], hub: String?, auth: String) throws -> Installation {
        try installations.upsert(envelope(InstallationUpsert(installation: Installation(installationId: id, platform: "apns", pushChannel: "AB\(id)", tags: tags)), auth: auth, hub: hub)).installation
    }

    @Test("a namespace key makes a hub with its two default policies; a hub's own key, a bad name or a name taken is refused")
    func create() throws {
        #expect(code { try self.hubs.create(self.envelope(HubCreate(name: "news"), auth: self.harness.full)) } == .unauthorized)
        #expect(code { try self.hubs.create(self.envelope(HubCreate(name: "-news"), auth: self.root)) } == .invalidArgument)
        let news = try hubs.create(envelope(HubCreate(name: "news"), auth: root))
        #expect(news.policies.map(\.name) == [AccessKey.defaultListenName, AccessKey.defaultFullName])
        #expect(news.policies.allSatisfy { $0.secondaryKey != nil && $0.secondaryKey != $0.key })
        #expect(code { try self.hubs.create(self.envelope(HubCreate(name: "NEWS"), auth: self.root)) } == .conflict)
        #expect(code { try self.hubs.create(self.envelope(HubCreate(name: "hub"), auth: self.root)) } == .conflict)
        let list = try hubs.list(envelope(HubListRequest(), auth: root)).hubs
        #expect(list.map(\.name) == ["hub", "news"] && list[0].isDefault && !list[1].isDefault)
        let catalog = try hubs.catalog(envelope(HubCatalogRequest(after: nil), auth: root))
        #expect(catalog.hubs?.map(\.name) == ["news"])
        #expect(try hubs.catalog(envelope(HubCatalogRequest(after: catalog.version), auth: root)).hubs == nil)
    }

    @Test("two hubs hold the same installation id and tags apart; a key of one is unknown to the other")
    func isolation() throws {
        let news = try hubs.create(envelope(HubCreate(name: "news"), auth: root))
        let newsFull = token(news, AccessKey.defaultFullName)
        _ = try upsert("dup", tags: ["World"], hub: nil, auth: harness.full)
        _ = try upsert("dup", tags: ["Sports"], hub: "news", auth: newsFull)
        #expect(try installations.get(envelope(InstallationGet(installationId: "dup"), auth: harness.full)).installation.tags == ["World"])
        let theirs = try installations.get(envelope(InstallationGet(installationId: "dup"), auth: newsFull, hub: "news")).installation
        #expect(theirs.tags == ["Sports"] && theirs.installationId == "dup")
        // Each hub's key on the other's hub: unknown there.
        #expect(code { try self.installations.get(self.envelope(InstallationGet(installationId: "dup"), auth: newsFull)) } == .unauthorized)
        #expect(code { try self.installations.get(self.envelope(InstallationGet(installationId: "dup"), auth: self.harness.full, hub: "news")) }
            == .unauthorized)
        #expect(code { try self.installations.get(self.envelope(InstallationGet(installationId: "dup"), auth: newsFull, hub: "nope")) } == .notFound)
        // Lists and the namespace key's reach.
        #expect(try installations.list(envelope(InstallationList(), auth: newsFull, hub: "news")).installations.map(\.tags) == [["Sports"]])
        #expect(try installations.list(envelope(InstallationList(), auth: harness.full)).installations.map(\.tags) == [["World"]])
        #expect(try installations.get(envelope(InstallationGet(installationId: "dup"), auth: root, hub: "news")).installation.tags == ["Sports"])
        // The dispatchers' snapshot holds both, each by its key.
        #expect(Set(try installations.snapshot(envelope(RegistrySnapshotRequest(), auth: root)).installations.map(\.installationId)) == ["dup", "news/dup"])
        // A user token of one hub's alice does not let an installation of the other claim her.
        let (aliceHere, _) = context.userTokens.issue(user: "alice", kind: .token, lifetime: 60)
        let listen = token(news, AccessKey.defaultListenName)
        let claiming = Installation(installationId: "claim", platform: "apns", pushChannel: "AB", userId: "alice")
        #expect(code { try self.installations.upsert(self.envelope(InstallationUpsert(installation: claiming, userToken: aliceHere), auth: listen, hub: "news")) }
            == .forbidden)
        let (aliceThere, _) = context.userTokens.issue(user: "news/alice", kind: .token, lifetime: 60)
        _ = try installations.upsert(envelope(InstallationUpsert(installation: claiming, userToken: aliceThere), auth: listen, hub: "news"))
        #expect(code { try self.installations.upsert(self.envelope(InstallationUpsert(installation: claiming, userToken: aliceThere), auth: self.harness.listen)) }
            == .forbidden)
        // A hub's Manage key may not take a snapshot of every hub.
        #expect(code { try self.installations.snapshot(self.envelope(RegistrySnapshotRequest(), auth: newsFull, hub: "news")) } == .unauthorized)
    }

    @Test("a regenerated primary key is refused from then on; the secondary keeps working; the default hub's keys rotate too")
    func rotation() throws {
        let news = try hubs.create(envelope(HubCreate(name: "news"), auth: root))
        let oldPrimary = token(news, AccessKey.defaultFullName)
        let secondary = token(news, AccessKey.defaultFullName, secondary: true)
        _ = try upsert("a", tags: [], hub: "news", auth: oldPrimary)
        let policy = try hubs.regenerate(envelope(HubKeysRegenerate(hub: "news", name: AccessKey.defaultFullName, policyKey: "PrimaryKey"), auth: root))
        #expect(policy.key != news.policies[1].key && policy.secondaryKey == news.policies[1].secondaryKey)
        #expect(code { try self.upsert("b", tags: [], hub: "news", auth: oldPrimary) } == .unauthorized)
        _ = try upsert("b", tags: [], hub: "news", auth: secondary)
        _ = try upsert("c", tags: [], hub: "news", auth: context.token(for: AccessKey(name: policy.name, key: policy.key, rights: .all), hub: "news"))
        #expect(code { try self.hubs.regenerate(self.envelope(HubKeysRegenerate(hub: "news", name: "Nope", policyKey: "PrimaryKey"), auth: self.root)) }
            == .notFound)
        #expect(code { try self.hubs.regenerate(self.envelope(HubKeysRegenerate(hub: "news", name: policy.name, policyKey: "Third"), auth: self.root)) }
            == .invalidArgument)

        // The default hub: keys.json's key works until its policy is regenerated in the catalog.
        let before = harness.full
        _ = try upsert("d", tags: [], hub: nil, auth: before)
        _ = try hubs.regenerate(envelope(HubKeysRegenerate(hub: "hub", name: AccessKey.defaultFullName, policyKey: "PrimaryKey"), auth: root))
        #expect(code { try self.upsert("e", tags: [], hub: nil, auth: before) } == .unauthorized)
        let listenStill = harness.listen
        _ = try upsert("f", tags: [], hub: nil, auth: listenStill)
    }

    @Test("a policy added with Send sends no more than that; removed, it is refused")
    func policies() throws {
        _ = try hubs.create(envelope(HubCreate(name: "news"), auth: root))
        let backend = try hubs.putPolicy(envelope(HubPolicyPut(hub: "news", name: "Backend", rights: ["Listen"]), auth: root))
        let token = context.token(for: AccessKey(name: "Backend", key: backend.key, rights: [.listen]), hub: "news")
        _ = try upsert("a", tags: [], hub: "news", auth: token)
        #expect(code { try self.installations.list(self.envelope(InstallationList(), auth: token, hub: "news")) } == .forbidden)
        #expect(code { try self.hubs.putPolicy(self.envelope(HubPolicyPut(hub: "news", name: "B", rights: ["Everything"]), auth: self.root)) }
            == .invalidArgument)
        #expect(code { try self.hubs.putPolicy(self.envelope(HubPolicyPut(hub: "news", name: AccessKey.rootManageName, rights: ["Listen"]), auth: self.root)) }
            == .invalidArgument)
        _ = try hubs.deletePolicy(envelope(HubPolicyDelete(hub: "news", name: "Backend"), auth: root))
        #expect(code { try self.upsert("b", tags: [], hub: "news", auth: token) } == .unauthorized)
    }

    @Test("deleting a hub deletes its installations alone; the default hub cannot be deleted; a deleted hub is not found")
    func delete() throws {
        let news = try hubs.create(envelope(HubCreate(name: "news"), auth: root))
        _ = try upsert("dup", tags: ["World"], hub: "news", auth: token(news, AccessKey.defaultFullName))
        _ = try upsert("dup", tags: ["World"], hub: nil, auth: harness.full)
        #expect(code { try self.hubs.delete(self.envelope(HubDelete(name: "hub"), auth: self.root)) } == .invalidArgument)
        #expect(code { try self.hubs.delete(self.envelope(HubDelete(name: "news"), auth: self.harness.full)) } == .unauthorized)
        _ = try hubs.delete(envelope(HubDelete(name: "news"), auth: root))
        #expect(try store.snapshot(now: Date()).installations.map(\.installationId) == ["dup"])
        #expect(code { try self.installations.get(self.envelope(InstallationGet(installationId: "dup"), auth: self.root, hub: "news")) } == .notFound)
        #expect(code { try self.hubs.delete(self.envelope(HubDelete(name: "news"), auth: self.root)) } == .notFound)
        #expect(try hubs.list(envelope(HubListRequest(), auth: root)).hubs.map(\.name) == ["hub"])
    }

    @Test("a hub made again under a deleted hub's name is a new generation: nothing of the old one reaches it, its old keys neither")
    func madeAgain() throws {
        let first = try hubs.create(envelope(HubCreate(name: "news"), auth: root))
        let oldKey = token(first, AccessKey.defaultFullName)
        // An installation the delete cannot reach in time stays under the old generation's key.
        _ = try store.upsert(Installation(installationId: "news/left", pushChannel: "k"), now: Date())
        _ = try hubs.delete(envelope(HubDelete(name: "news"), auth: root))
        _ = try store.upsert(Installation(installationId: "news/left", pushChannel: "k"), now: Date())
        let second = try hubs.create(envelope(HubCreate(name: "news"), auth: root))
        #expect(second.generation == 2 && context.scope("news").key("a") == "news~2/a")
        #expect(code { try self.upsert("a", tags: [], hub: "news", auth: oldKey) } == .unauthorized)
        let newKey = token(second, AccessKey.defaultFullName)
        #expect(code { try self.installations.get(self.envelope(InstallationGet(installationId: "left"), auth: newKey, hub: "news")) } == .notFound)
        _ = try upsert("a", tags: [], hub: "news", auth: newKey)
        #expect(try installations.list(envelope(InstallationList(), auth: newKey, hub: "news")).installations.map(\.installationId) == ["a"])
        #expect(Set(try store.snapshot(now: Date()).installations.map(\.installationId)) == ["news/left", "news~2/a"])
    }

    @Test("a hub's own limits: installations held, and requests a second from its keys; the namespace's key is not counted")
    func limits() throws {
        let news = try hubs.create(envelope(HubCreate(name: "news"), auth: root))
        let full = token(news, AccessKey.defaultFullName)
        let set = try hubs.putLimits(envelope(HubLimitsPut(hub: "news", limits: HubLimits(installations: 2)), auth: root))
        #expect(set.limits?.installations == 2 && set.limits?.requestsPerSecond == nil)
        #expect(code { try self.hubs.putLimits(self.envelope(HubLimitsPut(hub: "news", limits: HubLimits(sendsPerSecond: -1)), auth: self.root)) }
            == .invalidArgument)
        _ = try upsert("a", tags: [], hub: "news", auth: full)
        _ = try upsert("b", tags: [], hub: "news", auth: full)
        #expect(code { try self.upsert("c", tags: [], hub: "news", auth: full) } == .forbidden)
        _ = try upsert("a", tags: ["changed"], hub: "news", auth: full)
        _ = try upsert("c", tags: [], hub: nil, auth: harness.full)
        _ = try installations.delete(envelope(InstallationDelete(installationId: "b"), auth: full, hub: "news"))
        _ = try upsert("c", tags: [], hub: "news", auth: full)

        _ = try hubs.putLimits(envelope(HubLimitsPut(hub: "news", limits: HubLimits(requestsPerSecond: 1, installations: 0)), auth: root))
        // A burst of twice the rate, then refused; the namespace's key goes on.
        var refused = 0
        for _ in 0..<5 where code({ try self.installations.get(self.envelope(InstallationGet(installationId: "a"), auth: full, hub: "news")) }) == .rateLimited {
            refused += 1
        }
        #expect(refused >= 2)
        _ = try installations.get(envelope(InstallationGet(installationId: "a"), auth: root, hub: "news"))
        _ = try installations.get(envelope(InstallationGet(installationId: "c"), auth: harness.full))
    }
}
