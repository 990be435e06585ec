import Synchronization

/// HTTP responses counted by method and status, from every HTTP thread.
final class HTTPCounts: Sendable {
    private let counts = Mutex<[String: Int]>([:])
    private let pushes = Mutex<[Int: Int]>([:])

    func add(_ key: String) { counts.withLock { $0[key, default: 0] += 1 } }
    var snapshot: [String: Int] { counts.withLock { $0 } }

    /// Pushes to apps' endpoints, by the status answered.
    func add(push status: Int) { pushes.withLock { $0[status, default: 0] += 1 } }
    var pushSnapshot: [Int: Int] { pushes.withLock { $0 } }
}
