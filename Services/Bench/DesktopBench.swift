import Foundation

/// The desktop figures: two devices with Xvfb, a session bus and dunst each, and an agent on each
/// (Tests/Support/desktopbench.py, run as a child process with this folder's executables). Popups
/// per second through the agent beside notify-send and the server's own pace, a burst of posts
/// shown on both desktops, and a close on one device until the other's popup is withdrawn.
enum DesktopBench {
    static func run(popups: Int, tries: Int) throws -> [BenchResult] {
        let script = try RepositoryFile.locate("Tests/Support/desktopbench.py")
        guard let python = RepositoryFile.executable(named: "python3") else { throw BenchUnavailable("no python3 on PATH") }
        let folder = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent().path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [script, "--bin", folder, "--popups", String(popups), "--tries", String(tries)]
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let complaints = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let last = complaints.split(separator: "\n").last.map(String.init) ?? "exit status \(process.terminationStatus)"
            throw BenchUnavailable("the desktop figures did not run (\(last))")
        }
        return try String(decoding: printed, as: UTF8.self).split(separator: "\n").map { line in
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let name = object["name"] as? String, let unit = object["unit"] as? String
            else { throw BenchUnavailable("desktopbench.py printed \(line)") }
            return BenchResult(
                name: name, unit: unit, count: object["count"] as? Int ?? 0, seconds: object["seconds"] as? Double ?? 0,
                baseline: object["baseline"] as? String, value: object["value"] as? Double, note: object["note"] as? String)
        }
    }
}
