import CMosquitto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Drives many libmosquitto clients from one thread over one epoll set. The library's own loop
/// uses select(), which cannot watch descriptors past FD_SETSIZE, so a process could hold only a
/// few hundred clients with it.
final class MQTTClientLoop {
    /// Called with a client whose connection broke; the library has already closed its socket.
    var onLost: (OpaquePointer) -> Void = { _ in }

    private let epoll: Int32
    private var clients: [Int32: OpaquePointer] = [:]
    private var writeInterest: Set<Int32> = []
    private var extras: [Int32: () -> Void] = [:]
    private var events = [epoll_event](repeating: epoll_event(), count: 1024)
    private var lastMisc = ContinuousClock.now

    init() {
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        precondition(epoll >= 0, "epoll_create1 failed: \(errno)")
    }

    deinit { close(epoll) }

    var count: Int { clients.count }

    /// Watches a client whose socket is open (after mosquitto_connect).
    func add(_ client: OpaquePointer) {
        let fd = mosquitto_socket(client)
        guard fd >= 0 else { return }
        clients[fd] = client
        control(EPOLL_CTL_ADD, fd, write: mosquitto_want_write(client))
    }

    /// Watches a plain descriptor, such as stdin or a signal pipe; `handler` runs when it is readable.
    func watch(_ fd: Int32, handler: @escaping () -> Void) {
        extras[fd] = handler
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.fd = fd
        _ = epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event)
    }

    func unwatch(_ fd: Int32) {
        extras[fd] = nil
        _ = epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nil)
    }

    /// Asks for writability when the library has queued output outside the loop, e.g. after a publish.
    func refresh(_ client: OpaquePointer) {
        let fd = mosquitto_socket(client)
        guard fd >= 0, clients[fd] != nil else { return }
        let wants = mosquitto_want_write(client)
        if wants != writeInterest.contains(fd) { control(EPOLL_CTL_MOD, fd, write: wants) }
    }

    /// Waits up to `timeout` milliseconds, then lets every ready client read or write.
    /// Keepalive bookkeeping runs about once a second across all clients.
    func poll(timeout: Int32) {
        let ready = epoll_wait(epoll, &events, Int32(events.count), timeout)
        if ready > 0 {
            for index in 0..<Int(ready) {
                let fd = events[index].data.fd
                let flags = events[index].events
                if let handler = extras[fd] {
                    handler()
                    continue
                }
                guard let client = clients[fd] else { continue }
                if flags & (EPOLLIN.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 {
                    guard service(client, fd, mosquitto_loop_read(client, 1)) else { continue }
                }
                if flags & EPOLLOUT.rawValue != 0 {
                    guard service(client, fd, mosquitto_loop_write(client, 1)) else { continue }
                }
                let wants = mosquitto_want_write(client)
                if wants != writeInterest.contains(fd) { control(EPOLL_CTL_MOD, fd, write: wants) }
            }
        }
        if lastMisc.duration(to: .now) > .seconds(1) {
            lastMisc = .now
            for (fd, client) in clients {
                guard service(client, fd, mosquitto_loop_misc(client)) else { continue }
                refresh(client)
            }
        }
    }

    /// False when the client's connection is gone; it is then forgotten and reported.
    private func service(_ client: OpaquePointer, _ fd: Int32, _ rc: Int32) -> Bool {
        guard rc != MOSQ_ERR_SUCCESS.rawValue else { return true }
        // The library closed the socket, which took it out of the epoll set; the number may be reused.
        clients[fd] = nil
        writeInterest.remove(fd)
        onLost(client)
        return false
    }

    private func control(_ operation: Int32, _ fd: Int32, write: Bool) {
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | (write ? EPOLLOUT.rawValue : 0)
        event.data.fd = fd
        _ = epoll_ctl(epoll, operation, fd, &event)
        if write { writeInterest.insert(fd) } else { writeInterest.remove(fd) }
    }
}
