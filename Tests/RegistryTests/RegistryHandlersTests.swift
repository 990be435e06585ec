import Auth
import Bus
import Foundation
import HubProtocol
import ServiceKit
import TestSupport
import Testing

@testable import NHRegistry

/// The registry's request handlers in process, on a SQLite store, with tokens signed by the hub's
/// own keys: each right, each refusal, and a change published after each write.
@Suite("Registry request handlers")
final class RegistryHandlersTests {
    let harness: ServiceHarness
    let handlers: RegistryHandlers
    let published = Box(0)

    init() throws {
        harness = try ServiceHarness(service: "nh-registry")
        let published = self.published
        handlers = RegistryHandlers(context: harness.context, store: try StoreEngine.sqlite.makeStore(), publishChanges: { published.value += 1 })
    }

    var context: ServiceContext { harness.context }
    var full: String { harness.full }
    var listen: String { harness.listen }
    func envelope<R: HubRequest>(_ payload: R, auth: String?) -> Envelope<R> { harness.envelope(payload, auth: auth) }
    func code(_ body: () throws -> Any) -> ErrorCode? { harness.code(body) }

    @Test("Listen writes, reads and deletes; listing and snapshots need Manage; no token is unauthorized")
    func rights() throws {
        let installation = Installation(installationId: "i1", platform: "APNS", pushChannel: "AABB", tags: ["World"])
        #expect(code { try self.handlers.upsert(self.envelope(InstallationUpsert(installation: installation), auth: nil)) } == .unauthorized)
        let saved = try handlers.upsert(envelope(InstallationUpsert(installation: installation), auth: listen)).installation
        #expect(saved.platform == "apns" && saved.version != nil && published.value == 1)
        #expect(try handlers.get(envelope(InstallationGet(installationId: "i1"), auth: listen)).installation.tags == ["World"])
        #expect(code { try self.handlers.list(self.envelope(InstallationList(), auth: self.listen)) } == .forbidden)
        // A snapshot holds every hub's installations: a namespace key's alone, never a hub's own.
        #expect(code { try self.handlers.snapshot(self.envelope(RegistrySnapshotRequest(), auth: self.listen)) } == .unauthorized)
        #expect(code { try self.handlers.snapshot(self.envelope(RegistrySnapshotRequest(), auth: self.full)) } == .unauthorized)
        #expect(try handlers.list(envelope(InstallationList(tag: "World"), auth: full)).installations.count == 1)
        #expect(code { try self.handlers.list(self.envelope(InstallationList(limit: 0), auth: self.full)) } == .invalidArgument)
        #expect(try handlers.snapshot(envelope(RegistrySnapshotRequest(), auth: harness.root)).installations.count == 1)
        _ = try handlers.delete(envelope(InstallationDelete(installationId: "i1"), auth: listen))
        #expect(published.value == 2)
        #expect(code { try self.handlers.delete(self.envelope(InstallationDelete(installationId: "i1"), auth: self.listen)) } == .notFound)
        #expect(code { try self.handlers.get(self.envelope(InstallationGet(installationId: "i1"), auth: self.listen)) } == .notFound)
    }

    @Test("If-Match: a write or delete of a changed or missing installation is refused, naming the ETag")
    func ifMatch() throws {
        let installation = Installation(installationId: "i2", pushChannel: "c")
        #expect(code { try self.handlers.upsert(self.envelope(InstallationUpsert(installation: installation, ifMatch: "*"), auth: self.listen)) }
            == .notFound)
        let saved = try handlers.upsert(envelope(InstallationUpsert(installation: installation), auth: listen)).installation
        #expect(code { try self.handlers.upsert(self.envelope(InstallationUpsert(installation: installation, ifMatch: "\"999\""), auth: self.listen)) }
            == .preconditionFailed)
        #expect(code { try self.handlers.delete(self.envelope(InstallationDelete(installationId: "i2", ifMatch: "999"), auth: self.listen)) }
            == .preconditionFailed)
        _ = try handlers.upsert(envelope(InstallationUpsert(installation: installation, ifMatch: saved.etag), auth: listen))
    }

    @Test("an agent's device key binds its installation; a user needs proof; an agent's push endpoints stay when a write leaves them out")
    func agentRules() throws {
        let key = try CurveKeyPair.generate().publicKey
        let endpoint = String(repeating: "e", count: 43)
        var agent = Installation(installationId: "dev", pushChannel: key, endpoints: [endpoint: PushEndpoint()])
        _ = try handlers.upsert(envelope(InstallationUpsert(installation: agent), auth: listen))
        // Another key needs Manage.
        var stolen = agent
        stolen.pushChannel = try CurveKeyPair.generate().publicKey
        #expect(code { try self.handlers.upsert(self.envelope(InstallationUpsert(installation: stolen), auth: self.listen)) } == .forbidden)
        // A user needs a token of that user.
        agent.userId = "alice"
        #expect(code { try self.handlers.upsert(self.envelope(InstallationUpsert(installation: agent), auth: self.listen)) } == .forbidden)
        let token = context.userTokens.issue(user: "alice", kind: .token, lifetime: 600).token
        agent.endpoints = nil
        let saved = try handlers.upsert(envelope(InstallationUpsert(installation: agent, userToken: token), auth: listen)).installation
        #expect(saved.userId == "alice" && saved.endpoints == [endpoint: PushEndpoint()])
        // A patch keeps them too; the agent's own write of none removes them.
        let patched = try handlers.patch(envelope(
            InstallationPatch(installationId: "dev", operations: [PatchOperation(op: "add", path: "/tags", value: .string("News"))]), auth: listen))
        #expect(patched.installation.tags == ["News"] && patched.installation.endpoints?.count == 1)
        agent.endpoints = [:]
        #expect(try handlers.upsert(envelope(InstallationUpsert(installation: agent), auth: listen)).installation.endpoints == [:])
    }
}
