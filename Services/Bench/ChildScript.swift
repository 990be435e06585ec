import Foundation
import Synchronization

/// Figures that cannot be measured here (no python3, a helper script or its packages missing, no
/// PostgreSQL); the whole run skips them with this message.
struct BenchUnavailable: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) { self.description = description }
}

/// A file of this repository that a figure runs, such as Tests/Support/pgserver.py: `given` when
/// an option (`option`, such as --standins) names it, else under NH_REPO_DIR, else in the
/// repository that nh-bench was built in (a folder above its own).
enum RepositoryFile {
    static func locate(_ relative: String, given: String? = nil, option: String? = nil) throws -> String {
        if let given {
            guard FileManager.default.fileExists(atPath: given) else { throw BenchUnavailable("\(option ?? relative) \(given): no such file") }
            return given
        }
        if let repository = ProcessInfo.processInfo.environment["NH_REPO_DIR"] {
            let path = URL(fileURLWithPath: repository).appendingPathComponent(relative).path
            guard FileManager.default.fileExists(atPath: path) else { throw BenchUnavailable("NH_REPO_DIR=\(repository) has no \(relative)") }
            return path
        }
        var folder = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        while folder.pathComponents.count > 1 {
            let path = folder.appendingPathComponent(relative).path
            if FileManager.default.fileExists(atPath: path) { return path }
            folder.deleteLastPathComponent()
        }
        throw BenchUnavailable("cannot find \(relative) above nh-bench's folder; give \(option.map { "\($0) PATH or " } ?? "")NH_REPO_DIR")
    }

    /// The first `name` on PATH that can be run.
    static func executable(named name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }
}

/// A Python helper run as a child process (`python3 ARGUMENTS`), started once it has printed the
/// line it is awaited for. Its standard input is a pipe that stays open until it is stopped, so a
/// helper that ends at the end of its input ends with nh-bench; what it prints after that line goes
/// nowhere.
struct ChildScript {
    /// The line it printed that said it was ready.
    let line: String
    private let process: Process
    private let input: Pipe

    /// Starts `python3 arguments…` and waits up to `timeout` for a whole line that `ready` accepts.
    /// `what` names the helper in the message of the BenchUnavailable it throws when it did not
    /// start (its last line on standard error, or that it said nothing), `hint` follows that message.
    static func start(
        _ arguments: [String], what: String, hint: String = "", timeout: TimeInterval, ready: @escaping @Sendable (Substring) -> Bool
    ) throws -> ChildScript {
        guard let python = RepositoryFile.executable(named: "python3") else { throw BenchUnavailable("no python3 on PATH to run \(what)") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = arguments
        let input = Pipe(), output = Pipe(), errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let found = DispatchSemaphore(value: 0)
        let said = Mutex<String?>(nil)
        let reading = output.fileHandleForReading
        Thread {
            var text = ""
            while said.withLock({ $0 }) == nil {
                let chunk = reading.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
                said.withLock { $0 = Self.firstLine(in: text, where: ready) }
            }
            found.signal()
            // The rest of what it prints goes nowhere.
            while !reading.availableData.isEmpty {}
        }.start()
        if found.wait(timeout: .now() + timeout) == .success, let line = said.withLock({ $0 }) {
            return ChildScript(line: line, process: process, input: input)
        }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        let problem = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .split(separator: "\n").last.map(String.init) ?? "no ready line within \(Int(timeout)) s"
        throw BenchUnavailable("\(what) did not start (\(problem))\(hint)")
    }

    /// The first whole line of `text` (one its newline has ended) that `ready` accepts.
    static func firstLine(in text: String, where ready: (Substring) -> Bool) -> String? {
        text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().first(where: ready).map(String.init)
    }

    /// Ends it with SIGTERM and waits for it to exit.
    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        try? input.fileHandleForWriting.close()
    }
}
