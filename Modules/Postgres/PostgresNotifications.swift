import CLibPQ

/// LISTEN/NOTIFY: listen on channels, wait for the socket to become readable, then collect.
extension PostgresConnection {
    /// Starts listening on `channel` (any text; it is quoted). Kept across a reconnect.
    public func listen(_ channel: String) throws(PostgresError) {
        try execute("\(listenCommand) \(Self.quoteIdentifier(channel))")
        channels.insert(channel)
        unlistened.remove(channel)
    }

    public func unlisten(_ channel: String) throws(PostgresError) {
        try execute("UNLISTEN \(Self.quoteIdentifier(channel))")
        channels.remove(channel)
        unlistened.remove(channel)
    }

    /// Listens again on the channels a reconnect left unlistened. What stops it is thrown, kept in
    /// `listenFailure` and told to `onListenChange` (once, until a try succeeds, which is told too).
    func listenAgain() throws(PostgresError) {
        guard !unlistened.isEmpty else { return }
        do {
            for channel in unlistened.sorted() {
                try execute("\(listenCommand) \(Self.quoteIdentifier(channel))")
                unlistened.remove(channel)
            }
        } catch {
            if listenFailure == nil { onListenChange?(error) }
            listenFailure = error
            throw error
        }
        if listenFailure != nil {
            listenFailure = nil
            onListenChange?(nil)
        }
    }

    /// Whether the session listens on every channel, trying those a reconnect left first.
    func listensToAll() -> Bool {
        do {
            try listenAgain()
            return true
        } catch {
            // Kept and told by `listenAgain`; the caller hears only that the connection is not whole yet.
            return false
        }
    }

    /// Sends `payload` to every session listening on `channel`, when the transaction commits.
    public func notify(_ channel: String, payload: String = "") throws(PostgresError) {
        try run("SELECT pg_notify($1, $2)", [channel, payload])
    }

    /// The notifications that have arrived, without waiting: reads what the socket holds, then
    /// drains libpq's queue. Statements run on this connection queue notifications too, so call
    /// this after them as well as when `socket` is readable.
    public func notifications() throws(PostgresError) -> [(channel: String, payload: String)] {
        try listenAgain()
        let connection = try connection()
        guard PQconsumeInput(connection) == 1 else { throw error(nil, "read notifications from \(target)") }
        var received: [(channel: String, payload: String)] = []
        while let notification = PQnotifies(connection) {
            received.append((String(cString: notification.pointee.relname), String(cString: notification.pointee.extra)))
            PQfreemem(notification)
        }
        return received
    }
}

extension PostgresConnection {
    /// For a poll loop on a listening connection: whether notifications came since the last call.
    /// A connection that went is reset, and listens again; then this is true once it is back and
    /// listening, since what was sent meanwhile is lost, and false while the server does not
    /// answer or a channel could not be listened on again (`listenFailure`, tried again each poll).
    public func pollNotifications() -> Bool {
        let missed = !unlistened.isEmpty
        do {
            return try !notifications().isEmpty || missed
        } catch {
            return reconnectIfNeeded()
        }
    }
}

/// A connection of its own that listens on one channel, for a service whose database other
/// processes write to as well: poll it often, without waiting, and read what they wrote when it
/// says so.
public final class PostgresListener {
    public let connection: PostgresConnection
    public let channel: String

    /// `report` hears when the connection, reconnected, cannot listen again, and when it can.
    public init(url: String, channel: String, report: ((PostgresError?) -> Void)? = nil) throws(PostgresError) {
        connection = try PostgresConnection(url: url)
        self.channel = channel
        connection.onListenChange = report
        try connection.listen(channel)
    }

    /// Whether a notice arrived since the last poll, or the connection was just reopened (notices
    /// sent while it was lost are gone, so the caller reads what changed); callers also read now
    /// and then without one.
    public func poll() -> Bool { connection.pollNotifications() }

    public func close() { connection.close() }
}
