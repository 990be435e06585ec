import Foundation

/// Named points in a service's cycle where a test can stop the process, to pause it (or kill it)
/// at exactly that moment: with `NH_FAULT_PAUSE` naming a file, a process that reaches a point
/// whose name the file holds removes the file and stops itself with SIGSTOP, until the test sends
/// SIGCONT. Without the setting, reaching a point costs nothing but a branch.
public enum FaultPoint: String, Sendable, CaseIterable {
    /// Notifications have come (back from a pull, or whole on the publish service's stream) and are not planned yet.
    case pulled
    /// Inside a turn's write transaction, after its statements and before its lease check and commit.
    case write
    /// After a turn's write has committed.
    case committed
    /// Inside a lease beat, after the renewal and before the claim.
    case renewal
    /// Inside a bulk job's batch transaction, after its lines are applied and before it commits.
    case jobBatch

    private static let armingFile = ProcessInfo.processInfo.environment["NH_FAULT_PAUSE"]

    public static func reach(_ point: FaultPoint) {
        // No readable arming file: the fault point is not armed.
        guard let file = armingFile,
              let armed = try? String(contentsOfFile: file, encoding: .utf8),
              armed.trimmingCharacters(in: .whitespacesAndNewlines) == point.rawValue
        else { return }
        // Disarmed by whoever removed it first; either way it fires once.
        try? FileManager.default.removeItem(atPath: file)
        FileHandle.standardError.write(Data("fault point \(point.rawValue): stopping\n".utf8))
        kill(getpid(), SIGSTOP)
    }
}
