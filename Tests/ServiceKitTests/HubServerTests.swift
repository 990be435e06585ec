import Bus
import Foundation
import HubProtocol
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
}

final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<HealthReply, Error>?
    func set(_ value: Result<HealthReply, Error>) { lock.withLock { result = value } }
    var isEmpty: Bool { lock.withLock { result == nil } }
    func get() throws -> HealthReply { try lock.withLock { result! }.get() }
}
