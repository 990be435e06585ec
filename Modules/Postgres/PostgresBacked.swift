import Storage

/// A store on one PostgreSQL connection that follows the server's history (`followHistory`).
public protocol PostgresBacked: StoreSessions {
    var connection: PostgresConnection { get }
}

extension PostgresBacked {
    public func takeSessionEvents() -> [StoreSessionEvent] { connection.takeSessionEvents() }
    public var storeHistory: StoreHistory? { connection.history }

    public func check(_ position: UInt64, of counter: String, latest: UInt64) throws -> HistoryNumbering.Position {
        try connection.check(position, of: counter, latest: latest)
    }

    /// Asked between requests: a connection found broken is opened again first, so that health
    /// says where the store is now.
    public func replicationDetails() -> [String: String] {
        if !connection.isInTransaction { _ = connection.reconnectIfNeeded() }
        do {
            return try connection.replication().details
        } catch {
            return ["storeRole": "unknown", "storeError": error.message]
        }
    }
}
