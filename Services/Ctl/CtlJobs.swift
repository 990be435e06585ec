import Foundation
import HubProtocol
import ServiceKit

/// nhctl job: bulk imports and exports of installations, run by the registration service, with a
/// progress bar while they run.
enum CtlJobs {
    static let usage = "usage: nhctl job import FILE [--mode create|upsert|delete] [--output DIR] [--no-wait] | export DIR [--no-wait] | list | show ID [--wait]"

    static func run(_ parsed: Arguments, config: HubConfig, environment: [String: String]) -> Int32 {
        let words = Array(parsed.positionals.dropFirst())
        guard let command = words.first else { return Ctl.fail(usage) }
        do {
            let registry = try CtlCaller(parsed, config: config, environment: environment).client(config.registry.requests)
            defer { registry.close() }
            let job: HubJob
            var wait = !parsed.has("no-wait")
            switch (command, words.count) {
            case ("import", 2):
                let types: [String: HubJobType] = ["create": .importCreate, "upsert": .importUpsert, "delete": .importDelete]
                guard let type = types[parsed[option: "mode"] ?? "create"] else {
                    return Ctl.fail("--mode is create, upsert or delete\n\(usage)")
                }
                let file = absolute(words[1])
                let output = parsed[option: "output"].map(absolute) ?? (file as NSString).deletingLastPathComponent
                job = try registry.call(JobCreate(type: type, importFile: file, outputDirectory: output))
            case ("export", 2):
                job = try registry.call(JobCreate(type: .export, outputDirectory: absolute(words[1])))
            case ("show", 2):
                job = try registry.call(JobGet(jobId: words[1]))
                wait = parsed.has("wait")
            case ("list", 1):
                for job in try registry.call(JobList()).jobs {
                    if parsed.has("json") {
                        print(String(decoding: try HubCodec.makeEncoder().encode(job), as: UTF8.self))
                    } else {
                        print("\(job.jobId)  \(job.type.rawValue)  \(job.status.rawValue)  \(String(format: "%.1f", job.progress))%  \(job.applied) applied, \(job.failed) failed")
                    }
                }
                return 0
            default:
                return Ctl.fail(usage)
            }
            if !wait || job.status.finished { return report(job, json: parsed.has("json")) }
            if !parsed.has("json") { print("job \(job.jobId): \(job.type.rawValue)") }
            return report(try follow(job, registry: registry), json: parsed.has("json"))
        } catch {
            return CtlSend.report(error)
        }
    }

    /// Asks for the job until it has finished, drawing its progress on standard error: a bar
    /// redrawn in place on a terminal, a line at each tenth otherwise.
    static func follow(_ started: HubJob, registry: HubClient) throws -> HubJob {
        let terminal = isatty(2) == 1
        var job = started
        var lastTenth = -1
        while !job.status.finished {
            Thread.sleep(forTimeInterval: 0.2)
            job = try registry.call(JobGet(jobId: job.jobId))
            let line = progressLine(job)
            if terminal {
                FileHandle.standardError.write(Data("\r\u{1B}[K\(line)".utf8))
            } else if Int(job.progress / 10) > lastTenth || job.status.finished {
                lastTenth = Int(job.progress / 10)
                FileHandle.standardError.write(Data("\(line)\n".utf8))
            }
        }
        if terminal { FileHandle.standardError.write(Data("\n".utf8)) }
        return job
    }

    /// `[##########----------]  50.0%  500000 lines, 3 failed`.
    static func progressLine(_ job: HubJob, width: Int = 30) -> String {
        let filled = max(0, min(width, Int((job.progress / 100 * Double(width)).rounded(.down))))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let counted = job.type == .export ? "\(job.processed) written" : "\(job.processed) lines, \(job.failed) failed"
        return "[\(bar)] \(String(format: "%5.1f", job.progress))%  \(counted)"
    }

    /// Prints the job; 1 when it failed or some of its lines could not be applied.
    static func report(_ job: HubJob, json: Bool) -> Int32 {
        if json {
            print(String(decoding: (try? HubCodec.makeEncoder().encode(job)) ?? Data(), as: UTF8.self))
        } else {
            var text = "job \(job.jobId): \(job.status.rawValue)"
            if !job.status.finished { text += ", \(String(format: "%.1f", job.progress))%" }
            text += job.type == .export ? ", \(job.processed) installations written" : ", \(job.applied) applied, \(job.failed) failed"
            if let failure = job.failure { text += "\n  failure: \(failure)" }
            if let file = job.outputFile { text += "\n  output: \(file)" }
            if let file = job.failedFile { text += "\n  failed lines: \(file)" }
            print(text)
        }
        return job.status == .failed || job.failed > 0 ? 1 : 0
    }

    private static func absolute(_ path: String) -> String {
        path.hasPrefix("/") || path.hasPrefix("file:") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }
}
