import Bus
import Foundation
import HubProtocol
import Storage
import Testing

@testable import ServiceKit

@Suite("Group commit and forwarding")
struct CommitGroupTests {
    func database() throws -> (SQLiteDatabase, String) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-group-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let path = folder.appendingPathComponent("g.db").path
        let database = try SQLiteDatabase(path: path)
        try database.migrate([Migration(version: 1, "CREATE TABLE installations (id TEXT PRIMARY KEY);")])
        return (database, path)
    }

    @Test("an effect that fails after the commit is reported, and the others still run")
    func effectFailures() throws {
        let (database, _) = try database()
        let group = CommitGroup(database: database)
        var reported: [String] = []
        var ran: [Int] = []
        group.onEffectError = { reported.append("\($0)") }
        #expect(group.run {
            try? group.afterCommit { ran.append(1) }
            try? group.afterCommit { throw HubError(.unavailable, "the publisher is gone") }
            try? group.afterCommit { ran.append(3) }
        })
        #expect(ran == [1, 3])
        #expect(reported.count == 1 && reported[0].contains("the publisher is gone"))
    }

    @Test("waiting requests share one commit; a failing one is rolled back alone; effects run after the commit")
    func groupCommit() throws {
        let (database, path) = try database()
        let group = CommitGroup(database: database)
        let endpoint = "inproc://group-\(UUID().uuidString)"
        let server = try HubServer(bind: endpoint, logger: Logger(service: "nh-test", level: .error), maxMessageBytes: 4096)
        defer { server.close() }
        let observer = try SQLiteDatabase(path: path)
        var visibleInEffects: [Int] = []
        server.on(InstallationGet.self) { request in
            let id = request.payload.installationId
            try database.transaction {
                try database.run("INSERT INTO installations (id) VALUES (?)", [id])
                if id == "bad" { throw HubError(.invalidArgument, "bad id") }
            }
            // Another connection sees the row only once the group has committed.
            try group.afterCommit {
                visibleInEffects.append(try observer.queryOne("SELECT count(*) FROM installations WHERE id = ?", [id])?[0].int ?? -1)
            }
            return InstallationReply(installation: Installation(installationId: id, pushChannel: "c"))
        }
        let dealer = try ZMQContext.shared.socket(.dealer)
        defer { dealer.close() }
        try dealer.setReceiveTimeout(2_000)
        try dealer.connect(endpoint)
        for id in ["a", "bad", "b"] {
            try dealer.send([Data(), HubCodec.encode(InstallationGet(installationId: id), id: id)])
        }
        var served = 0
        for _ in 0..<100 where served < 3 {
            served += try server.serve(group: group)
            if served < 3 { Thread.sleep(forTimeInterval: 0.01) }
        }
        #expect(served == 3)
        var codes: [String: ErrorCode?] = [:]
        for _ in 0..<3 {
            guard let frames = try dealer.receive(), let body = frames.last else { break }
            let header = try HubCodec.header(of: body)
            codes[header.id] = header.type == ErrorReply.messageType ? try HubCodec.decode(ErrorReply.self, from: body).payload.code : nil
        }
        #expect(codes.count == 3)
        #expect(codes["bad"] == .some(.invalidArgument))
        #expect(codes["a"] == .some(nil) && codes["b"] == .some(nil))
        #expect(try database.query("SELECT id FROM installations ORDER BY id").map { $0[0].string } == ["a", "b"])
        #expect(visibleInEffects == [1, 1])
        // Outside a group, an effect runs at once.
        var ran = false
        try group.afterCommit { ran = true }
        #expect(ran)
    }

    @Test("a forwarder matches replies to requests, many in flight, and times out the unanswered")
    func forwarder() throws {
        let endpoint = "inproc://forward-\(UUID().uuidString)"
        let server = try HubServer(bind: endpoint, logger: Logger(service: "nh-test", level: .error), maxMessageBytes: 4096)
        defer { server.close() }
        server.on(InstallationGet.self) { request in
            guard request.payload.installationId != "missing" else { throw HubError(.notFound, "no installation") }
            return InstallationReply(installation: Installation(installationId: request.payload.installationId, pushChannel: "c"))
        }
        let forwarder = try HubForwarder(connect: endpoint, timeoutMs: 5_000) { nil }
        defer { forwarder.close() }
        var results: [String: Result<InstallationReply, HubError>] = [:]
        for id in ["one", "two", "missing"] {
            forwarder.forward(InstallationGet(installationId: id)) { results[id] = $0 }
        }
        #expect(forwarder.inFlight == 3)
        for _ in 0..<200 where results.count < 3 {
            try server.serve()
            try forwarder.receive()
            Thread.sleep(forTimeInterval: 0.005)
        }
        #expect(try results["one"]?.get().installation.installationId == "one")
        #expect(try results["two"]?.get().installation.installationId == "two")
        #expect(throws: HubError.self) { try results["missing"]?.get() }
        #expect(forwarder.inFlight == 0)

        let nowhere = try HubForwarder(connect: try LoopbackEnvironment.freeEndpoint(), timeoutMs: 50) { nil }
        defer { nowhere.close() }
        var late: Result<Ack, HubError>?
        nowhere.forward(InstallationDelete(installationId: "x")) { late = $0 }
        nowhere.expire(now: Date().addingTimeInterval(1))
        #expect(throws: HubError.self) { try late?.get() }
        if case .failure(let error)? = late { #expect(error.code == .timeout) }
    }

    /// Sends each id as an `installation.get` and serves them as one group; returns each reply's
    /// error code (nil for a success) and message, by id.
    func serveGroup(_ server: HubServer, _ group: CommitGroup, _ dealer: ZMQSocket, ids: [String]) throws -> [String: (ErrorCode?, String)] {
        for id in ids { try dealer.send([Data(), HubCodec.encode(InstallationGet(installationId: id), id: id)]) }
        var served = 0
        for _ in 0..<200 where served < ids.count {
            served += try server.serve(group: group)
            if served < ids.count { Thread.sleep(forTimeInterval: 0.01) }
        }
        var replies: [String: (ErrorCode?, String)] = [:]
        for _ in ids {
            guard let frames = try dealer.receive(), let body = frames.last else { break }
            let header = try HubCodec.header(of: body)
            if header.type == ErrorReply.messageType {
                let error = try HubCodec.decode(ErrorReply.self, from: body).payload
                replies[header.id] = (error.code, error.message)
            } else {
                replies[header.id] = (nil, "")
            }
        }
        return replies
    }

    @Test("a full store refuses the whole group with unavailable, keeps serving, and accepts again once there is room")
    func fullStore() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-full-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let database = try SQLiteDatabase(path: folder.appendingPathComponent("f.db").path, options: .init(maxBytes: 65_536))
        try database.migrate([Migration(version: 1, "CREATE TABLE rows (id TEXT PRIMARY KEY, filler BLOB);")])
        let group = CommitGroup(database: database)
        let endpoint = "inproc://full-\(UUID().uuidString)"
        let server = try HubServer(bind: endpoint, logger: Logger(service: "nh-test", level: .error), maxMessageBytes: 4096)
        defer { server.close() }
        server.on(InstallationGet.self) { request in
            try database.run("INSERT INTO rows (id, filler) VALUES (?, randomblob(6000))", [request.payload.installationId])
            return InstallationReply(installation: Installation(installationId: request.payload.installationId, pushChannel: "c"))
        }
        let dealer = try ZMQContext.shared.socket(.dealer)
        defer { dealer.close() }
        try dealer.setReceiveTimeout(2_000)
        try dealer.connect(endpoint)

        var accepted: [String] = []
        var refusal: (ErrorCode?, String)?
        for round in 0..<40 where refusal == nil {
            let id = "r\(round)"
            let reply = try serveGroup(server, group, dealer, ids: [id])[id]
            if reply?.0 == nil { accepted.append(id) } else { refusal = reply }
        }
        #expect(!accepted.isEmpty)
        #expect(refusal?.0 == .unavailable)
        #expect(refusal?.1.contains("full") == true)
        // A group of several is refused whole, each request answered, and none of them stored.
        let group2 = try serveGroup(server, group, dealer, ids: ["x1", "x2", "x3"])
        #expect(group2.count == 3)
        #expect(group2.values.allSatisfy { $0.0 == .unavailable })
        #expect(try database.query("SELECT id FROM rows ORDER BY id").map { $0[0].string ?? "" }.sorted() == accepted.sorted())

        // Room again, without reopening anything: the next request is accepted.
        try database.run("DELETE FROM rows WHERE id = ?", [accepted[0]])
        try database.run("DELETE FROM rows WHERE id = ?", [accepted[1]])
        let again = try serveGroup(server, group, dealer, ids: ["after"])
        #expect(again["after"].map { $0.0 == nil } == true)
    }

    @Test("a group whose transaction cannot even begin answers every request with unavailable")
    func beginFails() throws {
        let (database, path) = try database()
        let locked = try SQLiteDatabase(path: path, options: .init(busyTimeout: 0))
        let holder = try SQLiteDatabase(path: path)
        try holder.execute("BEGIN IMMEDIATE")
        let group = CommitGroup(database: locked)
        let endpoint = "inproc://begin-\(UUID().uuidString)"
        let server = try HubServer(bind: endpoint, logger: Logger(service: "nh-test", level: .error), maxMessageBytes: 4096)
        defer { server.close() }
        server.on(InstallationGet.self) { request in
            try locked.run("INSERT INTO installations (id) VALUES (?)", [request.payload.installationId])
            return InstallationReply(installation: Installation(installationId: request.payload.installationId, pushChannel: "c"))
        }
        let dealer = try ZMQContext.shared.socket(.dealer)
        defer { dealer.close() }
        try dealer.setReceiveTimeout(2_000)
        try dealer.connect(endpoint)
        let refused = try serveGroup(server, group, dealer, ids: ["a", "b"])
        #expect(refused.count == 2)
        #expect(refused.values.allSatisfy { $0.0 == .unavailable })
        try holder.execute("COMMIT")
        let accepted = try serveGroup(server, group, dealer, ids: ["c"])
        #expect(accepted["c"].map { $0.0 == nil } == true)
        _ = database
    }

    @Test("a full store's refusal names the setting that raises the cap, as the config and the environment spell it")
    func fullStoreNamesTheSetting() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-full-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let database = try SQLiteDatabase(path: folder.appendingPathComponent("f.db").path, options: SQLiteDatabase.Options(maxBytes: 65_536))
        try database.migrate([Migration(version: 1, "CREATE TABLE filler (value BLOB);")])
        var full: Error?
        for _ in 0..<100 where full == nil {
            do {
                try database.run("INSERT INTO filler (value) VALUES (?)", [Data(repeating: 1, count: 8_192)])
            } catch {
                full = error
            }
        }
        let error = try #require(full as? StorageError)
        #expect(error.isFull)
        let message = CommitGroup.describe(error)
        #expect(message.contains("limits.storeBytes") && message.contains("NH_LIMITS_STORE_BYTES"), "\(message)")
        // Both names are the ones the config loader reads.
        let config = try ConfigLoader.load(file: nil, environment: ["NH_LIMITS_STORE_BYTES": "70000"])
        #expect(config.limits.storeBytes == 70_000)
        let file = folder.appendingPathComponent("hub.json")
        try #"{"limits": {"storeBytes": 80000}}"#.write(to: file, atomically: true, encoding: .utf8)
        #expect(try ConfigLoader.load(file: file.path, environment: [:]).limits.storeBytes == 80_000)
    }
}
