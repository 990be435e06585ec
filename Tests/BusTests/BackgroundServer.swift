import Bus
import Foundation
import Synchronization

/// A RequestServer on its own thread for the length of a test. The socket is made, used and
/// closed on that thread only.
final class BackgroundServer: Sendable {
    final class Counters: Sendable {
        let running = Atomic<Bool>(true)
        let handled = Atomic<Int>(0)
    }

    let endpoint: String
    let counters = Counters()
    private let finished = DispatchSemaphore(value: 0)
    var handled: Int { counters.handled.load(ordering: .relaxed) }

    /// - Parameter reply: the reply body for a request body and its 1-based arrival number; nil sends none.
    init(
        bind: String, context: ZMQContext = .shared, curve: CurveKeyPair? = nil, maxMessageSize: Int = -1,
        reply: @escaping @Sendable ([Data], Int) -> [Data]?
    ) throws {
        let ready = DispatchSemaphore(value: 0)
        let bound = Mutex<Result<String, ZMQError>?>(nil)
        let counters = self.counters
        let finished = self.finished
        let thread = Thread {
            let server: RequestServer
            do {
                server = try RequestServer(context: context, bind: [bind], options: .init(maxMessageSize: maxMessageSize, curve: curve))
            } catch {
                bound.withLock { $0 = .failure(error as! ZMQError) }
                ready.signal()
                finished.signal()
                return
            }
            bound.withLock { $0 = .success(server.endpoints[0]) }
            ready.signal()
            var poller = Poller()
            poller.add(server.socket)
            while counters.running.load(ordering: .relaxed) {
                _ = try? poller.poll(timeout: 20)
                _ = try? server.serve { request in
                    let count = counters.handled.add(1, ordering: .relaxed).newValue
                    return reply(request.body, count)
                }
            }
            server.close()
            finished.signal()
        }
        thread.start()
        ready.wait()
        endpoint = try bound.withLock { try $0!.get() }
    }

    func stop() {
        if counters.running.exchange(false, ordering: .relaxed) { finished.wait() }
    }

    deinit { stop() }
}

/// A loopback TCP port nobody listens on now.
func freeTCPEndpoint() throws -> String {
    let socket = try ZMQContext.shared.socket(.router)
    try socket.bind("tcp://127.0.0.1:*")
    let endpoint = socket.lastEndpoint
    socket.close()
    return endpoint
}
