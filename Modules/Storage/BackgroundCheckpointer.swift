import Foundation
import Synchronization

/// Copies a WAL database's log into the database file from a thread and connection of its own,
/// so that the writer never waits for it. A checkpoint writes many pages and syncs the file; run
/// inside the writer's commit (SQLite's automatic checkpoint), it stalls whatever the writer's
/// thread does next. The writer turns its automatic checkpoints off (`wal_autocheckpoint=0`).
public final class BackgroundCheckpointer: @unchecked Sendable {
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    /// Starts checkpointing `writer`'s file every `interval` seconds, and turns the writer's own
    /// automatic checkpoints off.
    public init(for writer: SQLiteDatabase, interval: TimeInterval = 1) throws(StorageError) {
        // A connection of its own, handed to the thread and used by it alone from then on.
        nonisolated(unsafe) let connection = try SQLiteDatabase(path: writer.path, options: SQLiteDatabase.Options(synchronous: "NORMAL"))
        try writer.execute("PRAGMA wal_autocheckpoint=0")
        let thread = Thread { [self] in
            while !stopping.load(ordering: .acquiring) {
                // PASSIVE never waits for the writer: pages the writer is still using wait for the next turn.
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
