import Bus
import Foundation
import HTTPServer
import ServiceKit

/// The gateway's HTTP thread: a loop of its own that reads and writes every connection of the
/// HTTP server and answers sends itself, passing each to the publish service without waiting and
/// answering when the publish service does (`GatewayRouter.forward`). Every other request goes
/// to the server's worker threads.
///
/// It runs apart from the service's loop, so that nothing that loop waits on (the user streams'
/// calls to the sync store) holds up a connection. Its forwarder's socket is used by this thread
/// alone.
final class HTTPLoop: @unchecked Sendable {
    let server: HTTPServer
    let sends: HubForwarder
    private let loop: EventLoop
    private let finished = DispatchSemaphore(value: 0)

    init(server: HTTPServer, sends: HubForwarder, logger: Logger) {
        self.server = server
        self.sends = sends
        loop = EventLoop(signals: SignalWatcher(signals: []), logger: logger)
        loop.watch(fileDescriptor: server.fileDescriptor) { server.run() }
        // The answers go out in the same turn as the replies that make them.
        loop.watch(sends.socket) {
            try sends.receive()
            server.run()
        }
        loop.whenDue(in: { server.timeoutMilliseconds }) { server.run() }
        loop.every(milliseconds: 250) {
            sends.expire()
            server.run()
        }
    }

    func start() {
        let thread = Thread { [self] in
            do {
                try loop.run()
            } catch {
                loop.logger.error("the HTTP loop stopped", ("error", "\(error)"))
            }
            finished.signal()
        }
        thread.name = "http-loop"
        thread.start()
    }

    /// Stops the thread. Then, on the caller's thread, sends already passed on get the publish
    /// service's answer if it comes within `seconds`, and the server stops: what still waits gets
    /// 503, and every answer goes out before the connections close.
    func stop(waiting seconds: TimeInterval) {
        loop.stop()
        finished.wait()
        var poller = Poller()
        _ = poller.add(sends.socket)
        let deadline = Date().addingTimeInterval(seconds)
        while sends.inFlight > 0 && Date() < deadline {
            // Stopping: an answer that cannot be read here leaves its send to the 503 below.
            _ = try? poller.poll(timeout: 50)
            try? sends.receive()
            server.run()
        }
        server.stop()
    }
}
