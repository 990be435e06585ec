import Foundation

/// Instructions a process runs under `valgrind --tool=callgrind`, read while it runs: each read
/// asks callgrind to dump its counts (`callgrind_control -d`), and adds the new dump's total,
/// which counts every thread since the dump before. An instruction count does not depend on the
/// machine's load, so it shows regressions that timings on a busy machine cannot.
final class Callgrind {
    let folder: URL
    private var total = 0.0
    private var read: Set<String> = []

    init() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-bench-callgrind-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    }

    /// Checks that valgrind is there, naming what is missing.
    func check() throws {
        guard MosquittoBench.which("valgrind") != nil, MosquittoBench.which("callgrind_control") != nil, MosquittoBench.which("strip") != nil else {
            throw BenchError("valgrind and strip are needed (apt-get install valgrind binutils)")
        }
    }

    /// The command that runs `executable` under callgrind. It runs a copy without debug
    /// information, which valgrind 3.19 cannot read from Swift's executables (the instructions
    /// are the same).
    func command(_ executable: String) throws -> [String] {
        try check()
        let copy = folder.appendingPathComponent(URL(fileURLWithPath: executable).lastPathComponent)
        try? FileManager.default.removeItem(at: copy)
        try FileManager.default.copyItem(atPath: executable, toPath: copy.path)
        let strip = Process()
        strip.executableURL = URL(fileURLWithPath: MosquittoBench.which("strip")!)
        strip.arguments = ["--strip-debug", copy.path]
        try strip.run()
        strip.waitUntilExit()
        guard strip.terminationStatus == 0 else { throw BenchError("strip --strip-debug \(copy.path) failed") }
        return [MosquittoBench.which("valgrind")!, "--tool=callgrind", "--callgrind-out-file=\(folder.path)/callgrind.out.%p", copy.path]
    }

    /// Instructions run by `pid` so far, as far as its dumps say; nil when callgrind did not dump.
    func instructions(_ pid: Int32) -> Double? {
        guard let control = MosquittoBench.which("callgrind_control") else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: control)
        process.arguments = ["-d", String(pid)]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            return nil
        }
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        let prefix = "callgrind.out.\(pid)."
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [])
            .filter { $0.hasPrefix(prefix) && !read.contains($0) }
        guard !names.isEmpty else { return nil }
        for name in names {
            read.insert(name)
            guard let text = try? String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8),
                let count = Self.totalInstructions(text)
            else { return nil }
            total += count
        }
        return total
    }

    /// The instructions (the first event, Ir) a callgrind dump counts: its `totals:` line, or
    /// its `summary:` line when it has none.
    static func totalInstructions(_ dump: String) -> Double? {
        var summary: Double?
        for line in dump.split(separator: "\n") {
            for key in ["totals:", "summary:"] where line.hasPrefix(key) {
                guard let first = line.dropFirst(key.count).split(separator: " ").first, let value = Double(first) else { continue }
                if key == "totals:" { return value }
                summary = value
            }
        }
        return summary
    }

    /// Removes the dumps, unless NH_BENCH_CALLGRIND_KEEP is set: then their folder is named on
    /// standard error, for `callgrind_annotate` to read.
    func remove() {
        if ProcessInfo.processInfo.environment["NH_BENCH_CALLGRIND_KEEP"] != nil {
            FileHandle.standardError.write(Data("callgrind dumps kept in \(folder.path)\n".utf8))
            return
        }
        try? FileManager.default.removeItem(at: folder)
    }
}
