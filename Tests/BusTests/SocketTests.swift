import Bus
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Sockets")
struct SocketTests {
    @Test("an unknown transport fails with the call and errno")
    func typedErrors() throws {
        let socket = try ZMQContext.shared.socket(.dealer)
        do {
            try socket.connect("bogus://nowhere")
            Issue.record("connect should have failed")
        } catch {
            #expect(error.function.hasPrefix("zmq_connect"))
            #expect(error.errno == EPROTONOSUPPORT)
            #expect(!error.message.isEmpty)
        }
    }

    @Test("a closed socket refuses to send instead of crashing")
    func closedSocket() throws {
        let socket = try ZMQContext.shared.socket(.push)
        socket.close()
        #expect(socket.isClosed)
        #expect(throws: ZMQError.self) { try socket.send(Data("x".utf8)) }
    }

    @Test("PUSH/PULL and receive timeouts")
    func pushPull() throws {
        let endpoint = "inproc://pp-\(UUID().uuidString)"
        let pull = try ZMQContext.shared.socket(.pull)
        try pull.bind(endpoint)
        try pull.setReceiveTimeout(50)
        let push = try ZMQContext.shared.socket(.push)
        try push.connect(endpoint)
        #expect(try pull.receive() == nil)
        try push.send([Data("one".utf8), Data("two".utf8)])
        #expect(try pull.receive() == [Data("one".utf8), Data("two".utf8)])
    }

    @Test("the poller reports the ready socket and times out on none")
    func poller() throws {
        let endpoint = "inproc://poll-\(UUID().uuidString)"
        let pull = try ZMQContext.shared.socket(.pull)
        try pull.bind(endpoint)
        let quiet = try ZMQContext.shared.socket(.pull)
        try quiet.bind("inproc://quiet-\(UUID().uuidString)")
        var poller = Poller()
        let quietIndex = poller.add(quiet)
        let pullIndex = poller.add(pull)
        #expect(try poller.poll(timeout: 10).isEmpty)
        let push = try ZMQContext.shared.socket(.push)
        try push.connect(endpoint)
        try push.send(Data("x".utf8))
        let ready = try poller.poll(timeout: 2_000)
        #expect(ready == [pullIndex])
        #expect(!ready.contains(quietIndex))
    }

    @Test("REQ and REP in lock step")
    func reqRep() throws {
        let endpoint = "inproc://reqrep-\(UUID().uuidString)"
        let rep = try ZMQContext.shared.socket(.rep)
        try rep.bind(endpoint)
        let req = try ZMQContext.shared.socket(.req)
        try req.connect(endpoint)
        try req.send(Data("hello".utf8))
        #expect(try rep.receive() == [Data("hello".utf8)])
        try rep.send(Data("world".utf8))
        #expect(try req.receive() == [Data("world".utf8)])
    }

    @Test("a ROUTER reaches a DEALER by its routing id")
    func routingID() throws {
        let endpoint = "inproc://rid-\(UUID().uuidString)"
        let router = try ZMQContext.shared.socket(.router)
        try router.bind(endpoint)
        let dealer = try ZMQContext.shared.socket(.dealer)
        try dealer.setRoutingID(Data("agent-7".utf8))
        try dealer.connect(endpoint)
        try dealer.send(Data("hi".utf8))
        #expect(try router.receive() == [Data("agent-7".utf8), Data("hi".utf8)])
        try router.send([Data("agent-7".utf8), Data("back".utf8)])
        #expect(try dealer.receive() == [Data("back".utf8)])
        // The two-frame send without an array: the routing id, then the message.
        #expect(try router.send(Data("agent-7".utf8), Data("again".utf8), wait: false))
        #expect(try dealer.receive() == [Data("again".utf8)])
        // A route no peer has is refused where the ROUTER is mandatory, and nothing goes out.
        try router.setRouterMandatory(true)
        #expect(throws: ZMQError.self) { try router.send(Data("agent-8".utf8), Data("lost".utf8), wait: false) }
        #expect(try router.send(Data("agent-7".utf8), Data("last".utf8), wait: false))
        #expect(try dealer.receive() == [Data("last".utf8)])
    }

    @Test("bound to port *, the socket tells the real endpoint")
    func wildcardPort() throws {
        let socket = try ZMQContext.shared.socket(.router)
        try socket.bind("tcp://127.0.0.1:*")
        let endpoint = socket.lastEndpoint
        #expect(endpoint.hasPrefix("tcp://127.0.0.1:"))
        #expect(Int(endpoint.split(separator: ":").last ?? "") ?? 0 > 0)
    }

    @Test("libzmq has CURVE")
    func capabilities() {
        #expect(ZMQContext.has("curve"))
        #expect(ZMQContext.version.major == 4)
    }
}
