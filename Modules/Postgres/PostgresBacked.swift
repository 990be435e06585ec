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

    public func replicationDetails() -> [String: String] { connection.replicationDetails() }
}
