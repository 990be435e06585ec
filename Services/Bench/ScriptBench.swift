import Foundation

/// Figures measured by a Python script of Tests/Support, run as a child process with this folder's
/// executables: it prints one JSON object per figure (name, unit, count, seconds, baseline, value, note).
enum ScriptBench {
    static func run(_ script: String, _ arguments: [String], what: String) throws -> [BenchResult] {
        let path = try RepositoryFile.locate(script)
        guard let python = RepositoryFile.executable(named: "python3") else { throw BenchUnavailable("no python3 on PATH") }
        let folder = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent().path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [path, "--bin", folder] + arguments
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let complaints = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let last = complaints.split(separator: "\n").last.map(String.init) ?? "exit status \(process.terminationStatus)"
            throw BenchUnavailable("the \(what) figures did not run (\(last))")
        }
        return try String(decoding: printed, as: UTF8.self).split(separator: "\n").map { line in
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let name = object["name"] as? String, let unit = object["unit"] as? String
            else { throw BenchUnavailable("\(script) printed \(line)") }
            return BenchResult(
                name: name, unit: unit, count: object["count"] as? Int ?? 0, seconds: object["seconds"] as? Double ?? 0,
                baseline: object["baseline"] as? String, value: object["value"] as? Double, note: object["note"] as? String)
        }
    }
}

/// The desktop figures: two devices with Xvfb, a session bus and dunst each, and an agent on each
/// (Tests/Support/desktopbench.py). Popups per second through the agent beside notify-send and the
/// server's own pace, a burst of posts shown on both desktops, and a close on one device until the
/// other's popup is withdrawn.
enum DesktopBench {
    static func run(popups: Int, tries: Int) throws -> [BenchResult] {
        try ScriptBench.run("Tests/Support/desktopbench.py", ["--popups", String(popups), "--tries", String(tries)], what: "desktop")
    }
}

/// The UnifiedPush figures (Tests/Support/upbench.py): from an application server's POST until the
/// app's connector has the message, beside a plain hub notification to the same agent; messages
/// per second into one endpoint and into 1,000.
enum UnifiedPushBench {
    static func run(messages: Int) throws -> [BenchResult] {
        try ScriptBench.run("Tests/Support/upbench.py", ["--messages", String(messages)], what: "UnifiedPush")
    }
}
