/// How deep a connection is in its transactions, and the one way they nest: the outermost call
/// begins a transaction and commits it, each nested call sets a savepoint and releases it; a body
/// that throws, or a commit that fails, is rolled back. The SQL is the connection's own.
public final class TransactionNesting {
    /// 0 outside any transaction.
    public internal(set) var depth = 0

    public init() {}

    /// Runs `body` one level deeper. Each step gets the savepoint's name, nil for the outermost
    /// transaction; `commit` may throw to refuse the commit, which then rolls back.
    public func run<T>(
        _ body: () throws -> T,
        begin: (_ savepoint: String?) throws -> Void,
        commit: (_ savepoint: String?) throws -> Void,
        rollBack: (_ savepoint: String?) -> Void
    ) throws -> T {
        let savepoint = depth == 0 ? nil : "sp\(depth)"
        try begin(savepoint)
        depth += 1
        let result: T
        do {
            result = try body()
        } catch {
            depth -= 1
            rollBack(savepoint)
            throw error
        }
        depth -= 1
        do {
            try commit(savepoint)
        } catch {
            rollBack(savepoint)
            throw error
        }
        return result
    }
}
