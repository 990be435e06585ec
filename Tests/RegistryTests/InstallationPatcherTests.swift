import Foundation
import HubProtocol
import Storage
import Testing

@testable import NHRegistry

@Suite("Installation rules and patches")
struct InstallationPatcherTests {
    static let base = Installation(
        installationId: "i1", pushChannel: "c", tags: ["World"],
        templates: ["news": InstallationTemplate(body: #"{"a":"$(m)"}"#)])

    @Test("JSON Patch paths the REST API allows")
    func patches() throws {
        let patched = try InstallationPatcher.apply([
            PatchOperation(op: "add", path: "/tags", value: .array([.string("Sports"), .string("World")])),
            PatchOperation(op: "add", path: "/tags/Science"),
            PatchOperation(op: "remove", path: "/tags/World"),
            PatchOperation(op: "replace", path: "/userId", value: .string("alice")),
            PatchOperation(op: "replace", path: "/templates/news/body", value: .string(#"{"b":"$(m)"}"#)),
            PatchOperation(op: "add", path: "/templates/alt", value: .object(["body": .string("{}"), "tags": .array([.string("x")])])),
        ], to: Self.base)
        #expect(patched.tags == ["Sports", "Science"])
        #expect(patched.userId == "alice")
        #expect(patched.templates?["news"]?.body == #"{"b":"$(m)"}"#)
        #expect(patched.templates?["alt"] == InstallationTemplate(body: "{}", tags: ["x"]))
        let removed = try InstallationPatcher.apply([
            PatchOperation(op: "remove", path: "/templates/news"), PatchOperation(op: "remove", path: "/userId"),
            PatchOperation(op: "remove", path: "/tags"),
        ], to: patched)
        #expect(removed.templates?.keys.sorted() == ["alt"])
        #expect(removed.userId == nil)
        #expect(removed.tags.isEmpty)
    }

    @Test("a template given as a JSON string, as the SDKs send it")
    func templateAsString() throws {
        let patched = try InstallationPatcher.apply([
            PatchOperation(op: "add", path: "/templates/alt", value: .string(#"{"body":"{\"aps\":{\"alert\":\"$(m)\"}}","tags":["x"]}"#)),
        ], to: Self.base)
        #expect(patched.templates?["alt"] == InstallationTemplate(body: #"{"aps":{"alert":"$(m)"}}"#, tags: ["x"]))
        for bad in [#""just text""#, "[1]", #"{"tags":["x"]}"#, "{not json"] {
            #expect(throws: HubError.self) {
                try InstallationPatcher.apply([PatchOperation(op: "add", path: "/templates/alt", value: .string(bad))], to: Self.base)
            }
        }
    }

    @Test("bad operations name the problem", arguments: [
        (PatchOperation(op: "move", path: "/tags"), "op must be"),
        (PatchOperation(op: "add", path: "tags"), "starts with '/'"),
        (PatchOperation(op: "add", path: "/colour", value: .string("x")), "patchable paths"),
        (PatchOperation(op: "remove", path: "/tags/Nope"), "no tag 'Nope'"),
        (PatchOperation(op: "replace", path: "/pushChannel", value: .number(1)), "must be a string"),
        (PatchOperation(op: "add", path: "/templates/x", value: .object(["tags": .array([])])), "needs a 'body'"),
        (PatchOperation(op: "remove", path: "/templates/news/body"), "keep its body"),
    ])
    func refused(operation: PatchOperation, reason: String) {
        do {
            _ = try InstallationPatcher.apply([operation], to: Self.base)
            Issue.record("should be refused")
        } catch {
            #expect(error.message.contains(reason), "\(error.message)")
        }
    }

    @Test("installation rules", arguments: [
        (Installation(installationId: "", pushChannel: "c"), ErrorCode.invalidArgument),
        (Installation(installationId: "a b", pushChannel: "c"), .invalidArgument),
        (Installation(installationId: "i", pushChannel: ""), .invalidArgument),
        (Installation(installationId: "i", pushChannel: "c", tags: ["bad tag"]), .invalidTag),
        (Installation(installationId: "i", pushChannel: "c", userId: "a b"), .invalidArgument),
        (Installation(installationId: "i", pushChannel: "c", templates: ["t": InstallationTemplate(body: "{")]), .invalidTemplate),
        (Installation(installationId: "i", pushChannel: "c", templates: ["t": InstallationTemplate(body: "{}", expiry: "$(x")]), .invalidTemplate),
        (Installation(installationId: "i", pushChannel: "c", templates: ["t": InstallationTemplate(body: "{}", tags: ["a b"])]), .invalidTag),
        (Installation(installationId: "i", pushChannel: "c", expirationTime: Date(timeIntervalSince1970: 0)), .invalidArgument),
        // Push endpoints: an agent's only, ids that are SHA-256s in base64url, VAPID keys that are P-256 points, at most 100.
        (Installation(installationId: "i", platform: "apns", pushChannel: "c", endpoints: [String(repeating: "a", count: 43): PushEndpoint()]),
         .invalidArgument),
        (Installation(installationId: "i", pushChannel: "c", endpoints: ["short": PushEndpoint()]), .invalidArgument),
        (Installation(installationId: "i", pushChannel: "c", endpoints: [String(repeating: "a", count: 43): PushEndpoint(vapid: "key")]),
         .invalidArgument),
        (Installation(installationId: "i", pushChannel: "c", endpoints: Dictionary(uniqueKeysWithValues: (0..<101).map {
            (String(format: "%043d", $0), PushEndpoint())
        })), .invalidArgument),
    ])
    func rules(installation: Installation, expected: ErrorCode) {
        do {
            try InstallationRules.validate(installation, now: Date())
            Issue.record("should be refused")
        } catch {
            #expect(error.code == expected)
        }
    }

    @Test("setting or changing an installation's user needs a token of that user or a Manage key")
    func userNeedsProof() throws {
        let alice = Installation(installationId: "i1", pushChannel: "c", userId: "alice")
        let noToken: () throws(HubError) -> String = { () throws(HubError) in throw HubError(.unauthorized, "no user token") }
        let aliceToken: () throws(HubError) -> String = { () throws(HubError) in "alice" }
        let bobToken: () throws(HubError) -> String = { () throws(HubError) in "bob" }
        func code(_ installation: Installation, current: Installation?, manage: Bool, _ token: () throws(HubError) -> String) -> ErrorCode? {
            do {
                try InstallationRules.checkUser(installation, current: current, mayClaim: manage, tokenUser: token)
                return nil
            } catch {
                return error.code
            }
        }
        #expect(code(alice, current: nil, manage: false, noToken) == .forbidden)
        #expect(code(alice, current: nil, manage: false, bobToken) == .forbidden)
        #expect(code(alice, current: Self.base, manage: false, noToken) == .forbidden)
        #expect(code(alice, current: nil, manage: false, aliceToken) == nil)
        #expect(code(alice, current: nil, manage: true, noToken) == nil)
        // Keeping the user, or dropping it, needs no proof.
        #expect(code(alice, current: alice, manage: false, noToken) == nil)
        #expect(code(Self.base, current: alice, manage: false, noToken) == nil)
    }

    @Test("a tag given twice is stored once, where it first appears")
    func duplicateTags() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("nh-registry-\(UUID().uuidString).db").path
        let database = try SQLiteDatabase(path: path)
        try database.migrate(SQLiteInstallationStore.migrations)
        let store = SQLiteInstallationStore(database: database)
        let (stored, _) = try store.upsert(Installation(installationId: "d", pushChannel: "c", tags: ["b", "a", "b", "a"]), now: Date())
        #expect(stored.tags == ["b", "a"])
        #expect(try store.get("d", now: Date())?.tags == ["b", "a"])
    }
}
