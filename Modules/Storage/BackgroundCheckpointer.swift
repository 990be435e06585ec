import Foundation
import Synchronization

/// Copies a WAL database's log into the database file from a thread and connection of its own,
/// so that the writer seldom waits for it. A checkpoint writes many pages and syncs the file; run
/// inside the writer's commit (SQLite's automatic checkpoint) on every page the log holds, it
/// stalls whatever the writer's thread does next.
///
/// SQLite starts its log over from the beginning only when a write begins after everything in it
/// was copied. A writer that begins its next transaction right after each commit (a dispatcher's
/// groups, a busy publish service) never gives the thread that moment, and its log would grow
/// without end: each commit then extends the file, and reads look through ever more of it. So the
/// writer keeps SQLite's automatic checkpoint, at `restartPages` (SQLite's default): once the log
/// is that long, the commit copies what the thread has not copied yet, the last few commits'
/// pages, and the log starts over with the next transaction.
public final class BackgroundCheckpointer: @unchecked Sendable {
    /// The log's length, in pages, at which the writer's commit checkpoints the rest itself.
    public static let restartPages = 1_000

    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    /// Starts checkpointing `writer`'s file every `interval` seconds, and leaves the writer's own
    /// automatic checkpoint for once its log reaches `restartPages`.
    public init(for writer: SQLiteDatabase, interval: TimeInterval = 1) throws(StorageError) {
        // A connection of its own, handed to the thread and used by it alone from then on.
        nonisolated(unsafe) let connection = try SQLiteDatabase(path: writer.path, options: SQLiteDatabase.Options(synchronous: "NORMAL"))
        try writer.execute("PRAGMA wal_autocheckpoint=\(Self.restartPages)")
        let thread = Thread { [self] in
            while !stopping.load(ordering: .acquiring) {
                // PASSIVE never waits for the writer: pages the writer is still using wait for the next turn.
                // A checkpoint that fails now is tried at the next turn, and the writer checkpoints a long log itself.
                _ = try? connection.queryOne("PRAGMA wal_checkpoint(PASSIVE)")
                var slept = 0.0
                while slept < interval && !stopping.load(ordering: .acquiring) {
                    Thread.sleep(forTimeInterval: 0.05)
                    slept += 0.05
                }
            }
            connection.close()
            finished.signal()
        }
        thread.name = "checkpoint"
        thread.start()
    }

    /// Stops the thread after its current checkpoint.
    public func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        finished.wait()
    }
}
