import CLibZMQ

/// Waits on several sockets and file descriptors at once with `zmq_poll`.
/// Items are identified by the index `add` returned.
public struct Poller {
    private var items: [zmq_pollitem_t] = []
    private var sockets: [ZMQSocket?] = []

    public init() {}

    /// Watches a socket for incoming messages.
    @discardableResult
    public mutating func add(_ socket: ZMQSocket) -> Int {
        items.append(zmq_pollitem_t(socket: socket.handle, fd: -1, events: Int16(ZMQ_POLLIN), revents: 0))
        sockets.append(socket)
        return items.count - 1
    }

    /// Watches a plain file descriptor, such as a pipe, for readability.
    @discardableResult
    public mutating func add(fileDescriptor: Int32) -> Int {
        items.append(zmq_pollitem_t(socket: nil, fd: fileDescriptor, events: Int16(ZMQ_POLLIN), revents: 0))
        sockets.append(nil)
        return items.count - 1
    }

    /// Replaces the socket at `index`, as after a reconnect made a new one.
    public mutating func replace(_ index: Int, with socket: ZMQSocket) {
        items[index].socket = socket.handle
        sockets[index] = socket
    }

    /// Watches another file descriptor at `index`; a negative one is not watched.
    public mutating func replace(_ index: Int, fileDescriptor: Int32) {
        items[index].socket = nil
        items[index].fd = fileDescriptor
        sockets[index] = nil
    }

    public var count: Int { items.count }

    /// Waits up to `timeout` milliseconds (-1: for ever) and returns the indexes of ready items.
    /// Returns an empty set on timeout, or when a signal interrupted the wait.
    public mutating func poll(timeout: Int) throws(ZMQError) -> Set<Int> {
        for index in items.indices { items[index].revents = 0 }
        let count = Int32(items.count)
        let rc = zmq_poll(&items, count, timeout)
        if rc < 0 {
            let code = zmq_errno()
            if code == EINTR { return [] }
            throw ZMQError(function: "zmq_poll", errno: code)
        }
        var ready = Set<Int>()
        if rc == 0 { return ready }
        for (index, item) in items.enumerated() where item.revents & Int16(ZMQ_POLLIN) != 0 {
            ready.insert(index)
        }
        return ready
    }
}
