import Storage

/// Group commit: the requests a service finds waiting are handled in one transaction and
/// committed together, and only then are their replies sent and their events published. One
/// commit, and one sync to disk, then covers many requests, and nothing is announced or
/// acknowledged before it is durable.
public final class CommitGroup {
    public let database: SQLiteDatabase
    private var effects: [() throws -> Void] = []
    private var open = false

    public init(database: SQLiteDatabase) {
        self.database = database
    }

    /// Runs `effect` once the current group has committed, or now when no group is open.
    public func afterCommit(_ effect: @escaping () throws -> Void) throws {
        if open {
            effects.append(effect)
        } else {
            try effect()
        }
    }

    /// Runs `body` in one transaction and then the effects it queued. Returns false, with the
    /// effects dropped, when the commit failed.
    func run(_ body: () -> Void) -> Bool {
        open = true
        defer {
            open = false
            effects.removeAll()
        }
        do {
            try database.transaction { body() }
        } catch {
            return false
        }
        for effect in effects { try? effect() }
        return true
    }
}
