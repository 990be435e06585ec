import Bus
import Foundation
import Testing

@Suite("Request/reply")
struct RequestReplyTests {
    @Test("a request gets its reply", arguments: ["inproc", "tcp"])
    func roundTrip(transport: String) throws {
        let bind = transport == "inproc" ? "inproc://rr-\(UUID().uuidString)" : "tcp://127.0.0.1:*"
        let server = try BackgroundServer(bind: bind) { body, _ in [Data("re:".utf8) + body[0]] }
        defer { server.stop() }
        let client = try RequestClient(connect: server.endpoint, policy: RetryPolicy(timeout: 2_000, attempts: 2))
        for index in 0..<20 {
            let reply = try client.request([Data("ping \(index)".utf8)])
            #expect(reply == [Data("re:ping \(index)".utf8)])
        }
    }

    @Test("multipart bodies keep their frames, empty ones included")
    func multipart() throws {
        let server = try BackgroundServer(bind: "inproc://mp-\(UUID().uuidString)") { body, _ in body.reversed() }
        defer { server.stop() }
        let client = try RequestClient(connect: server.endpoint)
        let frames = [Data("a".utf8), Data(), Data(repeating: 7, count: 100_000)]
        #expect(try client.request(frames) == frames.reversed())
    }

    @Test("with no server, every attempt times out and the error says how many")
    func timeoutWithoutServer() throws {
        let endpoint = try freeTCPEndpoint()
        let client = try RequestClient(connect: endpoint, policy: RetryPolicy(timeout: 100, attempts: 3))
        #expect(throws: BusError.timeout(endpoint: endpoint, attempts: 3)) {
            try client.request([Data("anyone?".utf8)])
        }
    }

    @Test("a lost reply is retried on a fresh connection and the retry's reply comes back")
    func retryAfterLostReply() throws {
        // The server ignores the first request, as if its reply were lost, and answers the second.
        let server = try BackgroundServer(bind: "tcp://127.0.0.1:*") { body, count in
            count == 1 ? nil : [Data("answer \(count)".utf8)]
        }
        defer { server.stop() }
        let client = try RequestClient(connect: server.endpoint, policy: RetryPolicy(timeout: 1_000, attempts: 3))
        #expect(try client.request([Data("q".utf8)]) == [Data("answer 2".utf8)])
        #expect(server.handled == 2)
    }

    @Test("a reply that does not match is dropped while waiting")
    func nonMatchingRepliesDropped() throws {
        let server = try BackgroundServer(bind: "inproc://nm-\(UUID().uuidString)") { body, _ in
            body
        }
        defer { server.stop() }
        let client = try RequestClient(connect: server.endpoint, policy: RetryPolicy(timeout: 200, attempts: 1))
        #expect(throws: BusError.self) {
            try client.request([Data("x".utf8)]) { reply in reply == [Data("y".utf8)] }
        }
    }

    @Test("a ROUTER message splits into route and body, with or without a delimiter")
    func routedRequestSplit() {
        let id = Data([0, 1, 2])
        let withDelimiter = RoutedRequest(frames: [id, Data(), Data("b".utf8)])
        #expect(withDelimiter.route == [id, Data()])
        #expect(withDelimiter.body == [Data("b".utf8)])
        let bare = RoutedRequest(frames: [id, Data("b".utf8), Data("c".utf8)])
        #expect(bare.route == [id])
        #expect(bare.body == [Data("b".utf8), Data("c".utf8)])
        let truncated = RoutedRequest(frames: [id, Data()])
        #expect(truncated.route == [id, Data()])
        #expect(truncated.body.isEmpty)
    }
}
