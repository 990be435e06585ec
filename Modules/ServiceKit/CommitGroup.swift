import Storage

/// Group commit: the requests a service finds waiting are handled in one transaction and
/// committed together, and only then are their replies sent and their events published. One
/// commit, and one sync to disk, then covers many requests, and nothing is announced or
/// acknowledged before it is durable.
public final class CommitGroup {
    /// Runs its argument in one transaction of the service's store: SQLite's or PostgreSQL's.
    private let transaction: (() -> Void) throws -> Void
    private var effects: [() throws -> Void] = []
    /// The keys of the effects queued once in the open group.
    private var keys: Set<String> = []
    private var open = false
    /// Why the last group failed, as the message every request of that group gets.
    public private(set) var failureMessage = ""
    /// Hears an effect that failed after its group committed (a publish, an announcement): what
    /// was committed stands, and the failure is reported rather than lost.
    public var onEffectError: (Error) -> Void = { _ in }

    public convenience init(database: SQLiteDatabase) {
        self.init { body in try database.transaction { body() } }
    }

    /// A group over any store that runs a body in one transaction, such as a PostgreSQL connection.
    public init(transaction: @escaping (() -> Void) throws -> Void) {
        self.transaction = transaction
    }

    /// Runs `effect` once the current group has committed, or now when no group is open.
    public func afterCommit(_ effect: @escaping () throws -> Void) throws {
        if open {
            effects.append(effect)
        } else {
            try effect()
        }
    }

    /// Like `afterCommit`, but an effect queued again under the same `key` in the same group runs once.
    public func afterCommit(once key: String, _ effect: @escaping () throws -> Void) throws {
        guard open else { return try effect() }
        guard keys.insert(key).inserted else { return }
        effects.append(effect)
    }

    /// Runs `body` in one transaction and then the effects it queued. Returns false, with the
    /// effects dropped, when the commit failed.
    func run(_ body: () -> Void) -> Bool {
        open = true
        defer {
            open = false
            effects.removeAll()
            keys.removeAll()
        }
        do {
            try transaction(body)
        } catch {
            failureMessage = CommitGroup.describe(error)
            return false
        }
        for effect in effects {
            do {
                try effect()
            } catch {
                onEffectError(error)
            }
        }
        return true
    }

    /// The setting that caps the store's size.
    static let storeLimit = "limits.storeBytes"

    /// The reason a commit failed, in words that say what to do.
    static func describe(_ error: Error) -> String {
        if let storage = error as? StorageError, storage.isFull {
            return "the store is full (\(storage.message)); nothing was changed: free disk space or raise \(storeLimit) "
                + "(\(ConfigLoader.variableName(["limits", "storeBytes"])); 0 is as much as the disk has), then retry"
        }
        return "the store could not commit (\(error)); nothing was changed, so the request can be retried"
    }
}
