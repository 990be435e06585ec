import Bus
import Foundation
import HubProtocol
import Synchronization
import Testing

@testable import ServiceKit

@Suite("HubServer")
struct HubServerTests {
    func makeServer() throws -> HubServer {
        let server = try HubServer(
            bind: "inproc://hub-\(UUID().uuidString)", logger: Logger(service: "nh-test", level: .error),
            maxMessageBytes: 4096)
        server.on(InstallationGet.self) { envelope in
            guard envelope.payload.installationId == "known" else {
                throw HubError(.notFound, "no installation '\(envelope.payload.installationId)'")
            }
            return InstallationReply(installation: Installation(installationId: "known", pushChannel: "c"))
        }
        return server
    }

    /// A server with no handlers whose log lines go to `lines`.
    func loggingServer(_ lines: LineBox) throws -> HubServer {
        try HubServer(
            bind: "inproc://logged-\(UUID().uuidString)", logger: Logger(service: "nh-test", level: .info, sink: { lines.append($0) }),
            maxMessageBytes: 4096)
    }

    func errorCode(_ reply: [Data]) -> ErrorCode? {
        guard reply.count == 1 else { return nil }
        return (try? HubCodec.decode(ErrorReply.self, from: reply[0]))?.payload.code
    }

    @Test("bad frames get an error reply with a stable code", arguments: [
        ([Data](), ErrorCode.malformedFrames),
        ([Data("a".utf8), Data("b".utf8)], .malformedFrames),
        ([Data()], .emptyMessage),
        ([Data([0xff, 0x00, 0x13])], .malformedEnvelope),
        ([Data(#"{"v":1,"type":"nope","id":"9","payload":{}}"#.utf8)], .unknownType),
        ([Data(repeating: 0x20, count: 5000)], .payloadTooLarge),
        ([Data(#"{"v":1,"type":"installation.get","id":"9","payload":{"installationId":"x"}}"#.utf8)], .notFound),
    ])
    func badFrames(body: [Data], expected: ErrorCode) throws {
        let server = try makeServer()
        defer { server.close() }
        #expect(errorCode(server.handle(body)) == expected)
        #expect(server.errorCounts[expected] == 1)
    }

    /// The client of a deferred request hears nothing when its reply is lost: the server says so
    /// in its log and its metrics, with what the request was.
    @Test("a deferred reply the socket will not take is logged with its type and correlation id, and counted")
    func lostDeferredReply() throws {
        let lines = LineBox()
        let server = try loggingServer(lines)
        nonisolated(unsafe) var respond: ((Result<InstallationReply, HubError>) -> Void)?
        server.onDeferred(InstallationGet.self) { _, later in respond = later }
        let body = Data(#"{"v":1,"type":"installation.get","id":"late-7","payload":{"installationId":"x"}}"#.utf8)
        #expect(server.handle([body], route: [Data("peer".utf8)]).isEmpty)
        server.close()
        let reply = try #require(respond)
        reply(.success(InstallationReply(installation: Installation(installationId: "x", pushChannel: "c"))))
        #expect(server.deferredRepliesLost == 1)
        #expect(server.samples["nh_deferred_replies_lost_total"] == 1)
        let logged = lines.all.filter { $0.contains("deferred reply could not be sent") }
        #expect(logged.count == 1)
        #expect(logged.first?.contains("type=installation.get") == true && logged.first?.contains("id=late-7") == true)
    }

    @Test("an internal error a handler throws, such as a stored row that does not read, is logged as an error; a refusal is not")
    func internalErrorsLogged() throws {
        let lines = LineBox()
        let server = try loggingServer(lines)
        defer { server.close() }
        server.on(InstallationGet.self) { envelope in
            guard envelope.payload.installationId == "refused" else {
                throw HubError(.internal, "installations.document cannot be read: it is NULL where a byte string is required")
            }
            throw HubError(.notFound, "no installation 'refused'")
        }
        func ask(_ id: String) -> ErrorCode? {
            errorCode(server.handle([Data(#"{"v":1,"type":"installation.get","id":"q-\#(id)","payload":{"installationId":"\#(id)"}}"#.utf8)]))
        }
        #expect(ask("refused") == .notFound)
        #expect(lines.all.isEmpty)
        #expect(ask("broken") == .internal)
        #expect(lines.all.count == 1)
        #expect(lines.all.first?.contains("level=error") == true && lines.all.first?.contains("installations.document") == true)
        #expect(lines.all.first?.contains("id=q-broken") == true)
    }

    @Test("a request over the size limit is refused at once with its own correlation id and the limit")
    func tooLargeKeepsID() throws {
        let server = try makeServer()
        defer { server.close() }
        let big = String(repeating: "x", count: 10_000)
        let reply = server.handle([Data(#"{"v":1,"type":"installation.get","id":"big-1","payload":{"installationId":"\#(big)"}}"#.utf8)])
        let error = try HubCodec.decode(ErrorReply.self, from: reply[0])
        #expect(error.id == "big-1")
        #expect(error.payload.code == .payloadTooLarge)
        #expect(error.payload.message.contains("4096"))
    }

    @Test("a request too large for the socket is refused by the client with payload_too_large, not sent into a timeout")
    func tooLargeForTheSocket() throws {
        let endpoint = "inproc://too-large-\(UUID().uuidString)"
        let server = try HubServer(bind: endpoint, logger: Logger(service: "nh-test", level: .error), maxMessageBytes: 4096)
        defer { server.close() }
        server.on(InstallationGet.self) { _ in throw HubError(.notFound, "none") }
        let client = try HubClient(connect: endpoint, policy: RetryPolicy(timeout: 500, attempts: 1))
        defer { client.close() }
        let huge = InstallationGet(installationId: String(repeating: "x", count: HubServer.socketLimit(maxMessageBytes: 4096) + 1))
        // Over TCP the socket would drop such a frame and the call would time out; the client does not send it.
        client.maxMessageBytes = 4096
        do {
            _ = try client.call(huge)
            Issue.record("a frame over the socket's limit was sent")
        } catch let error as HubError {
            #expect(error.code == .payloadTooLarge)
            #expect(error.message.contains("\(HubServer.socketLimit(maxMessageBytes: 4096)) bytes") && error.message.contains("nothing was sent"))
        }
    }

    @Test("a good request gets its typed reply with the same correlation id")
    func goodRequest() throws {
        let server = try makeServer()
        defer { server.close() }
        let reply = server.handle([HubCodec.encode(InstallationGet(installationId: "known"), id: "corr-5")])
        let decoded = try HubCodec.decodeReply(InstallationReply.self, from: reply[0])
        #expect(decoded.id == "corr-5")
        #expect(decoded.payload.installation.installationId == "known")
    }

    @Test("an unknown type's error lists what the service does answer")
    func unknownTypeMessage() throws {
        let server = try makeServer()
        defer { server.close() }
        let reply = server.handle([Data(#"{"v":1,"type":"nope","id":"9","payload":{}}"#.utf8)])
        let error = try HubCodec.decode(ErrorReply.self, from: reply[0])
        #expect(error.id == "9")
        #expect(error.payload.message.contains("installation.get"))
    }

    @Test("over a real socket: health through HubClient, and errors as thrown HubErrors")
    func overTheBus() throws {
        let endpoint = "inproc://hubclient-\(UUID().uuidString)"
        let server = try HubServer(bind: endpoint, logger: Logger(service: "nh-test", level: .error), maxMessageBytes: 4096)
        server.on(HealthRequest.self) { _ in
            HealthReply(service: "nh-test", status: "ok", version: "t", pid: 1, uptimeSeconds: 0, endpoints: [:])
        }
        // Serve from this thread: send first, then let the server answer, then read.
        let done = DispatchSemaphore(value: 0)
        let box = ResultBox()
        Thread {
            box.set(Result {
                let client = try HubClient(connect: endpoint, policy: RetryPolicy(timeout: 2_000, attempts: 1))
                defer { client.close() }
                return try client.call(HealthRequest())
            })
            done.signal()
        }.start()
        let deadline = Date().addingTimeInterval(5)
        while box.isEmpty && Date() < deadline {
            try server.serve()
            Thread.sleep(forTimeInterval: 0.005)
        }
        done.wait()
        #expect(try box.get().service == "nh-test")
        server.close()
    }

    @Test("a body that is not JSON is refused as such with no id, however well its header reads", arguments: [
        "{\"auth\":\"t\",\"id\":\"f-1\",\"payload\":{\"installatio\u{1a}Id\":\"n-1\"},\"type\":\"installation.get\",\"v\":1}",
        "{\"auth\":\"t\",\"id\":\"f-1\",\"payload\":{\"a\u{1a}\":\"n-1\"},\"type\":\"notification.cancel\",\"v\":1}",
        #"{"auth":null,"id":"f-1","payload":{"installationId":"i","x-1","x-1"},"type":"installation.get","v":1}"#,
    ])
    func notJSONAfterAScannedHeader(text: String) throws {
        let server = try makeServer()
        defer { server.close() }
        #expect(HubCodec.scanHeader(Data(text.utf8)) != nil)
        let error = try HubCodec.decode(ErrorReply.self, from: server.handle([Data(text.utf8)])[0])
        #expect(error.payload.code == .malformedEnvelope)
        #expect(error.id == "")
    }

    @Test("a request naming its id twice is answered with the id its header was read with, whatever the handler says")
    func idNamedTwice() throws {
        let server = try makeServer()
        defer { server.close() }
        let known = Data(#"{"v":1,"type":"installation.get","id":"a","id":"b","payload":{"installationId":"known"}}"#.utf8)
        let other = Data(#"{"v":1,"type":"installation.get","id":"a","id":"b","payload":{"installationId":"other"}}"#.utf8)
        let header = try HubCodec.parse(known).header
        #expect(try HubCodec.decodeReply(InstallationReply.self, from: server.handle([known])[0]).id == header.id)
        #expect(try HubCodec.decode(ErrorReply.self, from: server.handle([other])[0]).id == header.id)
    }

    @Test("requests of a type the service answers are counted by type, those refused for what they hold too")
    func countedByType() throws {
        let server = try makeServer()
        defer { server.close() }
        _ = server.handle([HubCodec.encode(InstallationGet(installationId: "known"), id: "1")])
        _ = server.handle([Data(#"{"v":1,"type":"installation.get","id":"2","payload":{"installationId":"known","x":1}}"#.utf8)])
        _ = server.handle([Data(#"{"v":1,"type":"nope","id":"3","payload":{}}"#.utf8)])
        #expect(server.requestsByType["installation.get"]?.count == 2)
        #expect(server.requestsByType["nope"] == nil)
        #expect(server.requestCount == 3)
    }

    @Test("a group's requests decoded side by side are answered in the order they came, each as it would be alone",
          .enabled(if: ProcessInfo.processInfo.activeProcessorCount > 1, "decoded side by side only with more than one core"))
    func groupDecodedSideBySide() throws {
        let server = try makeServer()
        defer { server.close() }
        server.on(Probe.self) { envelope in Ack() }
        var bodies: [[Data]] = []
        for index in 0..<64 {
            switch index % 8 {
            case 0: bodies.append([HubCodec.encode(InstallationGet(installationId: "known"), id: "g-\(index)")])
            case 1: bodies.append([HubCodec.encode(InstallationGet(installationId: "other"), id: "g-\(index)")])
            case 2: bodies.append([Data(#"{"v":1,"type":"installation.get","id":"g-\#(index)","payload":{"installationId":"known","x":1}}"#.utf8)])
            case 3: bodies.append([Data("{not json".utf8)])
            case 4: bodies.append([Data(#"{"v":1,"type":"nope","id":"g-\#(index)","payload":{}}"#.utf8)])
            case 5: bodies.append([Data("a".utf8), Data("b".utf8)])
            default: bodies.append([HubCodec.encode(Probe(index: index), id: "g-\(index)")])
            }
        }
        let alone = bodies.map { server.handle($0) }
        Probe.pairs = true
        defer { Probe.pairs = false }
        let decoded = server.decodeAll(bodies)
        let together = decoded.map { server.answer($0, route: []) }
        #expect(together == alone)
        // The first probe (index 6, on one thread) waits for the second (index 7, on the other).
        #expect(Probe.waited.withLock { $0 } == [6: true])
        #expect(server.requestCount == 128)
    }
}

final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<HealthReply, Error>?
    func set(_ value: Result<HealthReply, Error>) { lock.withLock { result = value } }
    var isEmpty: Bool { lock.withLock { result == nil } }
    func get() throws -> HealthReply { try lock.withLock { result! }.get() }

}

/// A request whose decoding, while `pairs` is set, makes index 6 wait for index 7 to be decoded:
/// which it can be only on another thread.
struct Probe: HubRequest {
    typealias Reply = Ack
    static let messageType: MessageType = "test.probe"
    var index: Int

    init(index: Int) { self.index = index }

    nonisolated(unsafe) static var pairs = false
    static let seventh = DispatchSemaphore(value: 0)
    static let waited = Mutex<[Int: Bool]>([:])

    init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        index = try container.decode(Int.self, forKey: .index)
        guard Probe.pairs else { return }
        if index == 7 { Probe.seventh.signal() }
        if index == 6 {
            let signalled = Probe.seventh.wait(timeout: .now() + 10) == .success
            Probe.waited.withLock { $0[6] = signalled }
        }
    }

}
