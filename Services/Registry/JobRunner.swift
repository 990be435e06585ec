import Auth
import Foundation
import HubProtocol
import Registrations
import ServiceKit

/// Bulk jobs (`POST /{hub}/jobs`, `nhctl job`): imports that create, upsert or delete the
/// installations of a file, a line each, and exports that write a hub's installations to one.
///
/// A job runs in the registration service's loop, a batch of lines at a time between requests. A
/// batch's writes, the job's new offset in its input and the lines it could not apply commit in one
/// transaction (`JobStore.advance`), so a job killed at any point goes on from its last batch
/// when the service starts again, and applies each line once. The batch's changes go out on the
/// registry's stream once it commits, as every write's do. The files are paths on this service's
/// host; an export starts over after a restart, as its output is written whole before it is named.
final class JobRunner {
    let context: ServiceContext
    let store: any InstallationStore
    let handlers: RegistryHandlers
    let publishChanges: () throws -> Void
    /// Lines per batch: a transaction each (`limits.jobBatchLines`).
    var batchLines: Int { context.config.limits.jobBatchLines }
    /// How long one turn of the loop may spend on jobs before it serves requests again.
    var turnBudget: Duration = .milliseconds(250)

    /// This runner's name on the jobs it holds the lease of.
    private let owner = RandomID.timeOrdered()
    /// How long a job's lease lasts unless a batch renews it: another process sharing the store
    /// takes the job over after it. Three service heartbeats, at least 3 s, as a dispatcher's.
    var leasePeriod: TimeInterval { Double(context.config.leasePeriodMs) / 1000 }
    /// The job under way, with its input open.
    private var current: Running?
    /// When to look in the store for a job to run (made by another process, or left by a restart).
    private var lookAgain = ContinuousClock.now

    init(context: ServiceContext, store: any InstallationStore, handlers: RegistryHandlers, publishChanges: @escaping () throws -> Void) {
        self.context = context
        self.store = store
        self.handlers = handlers
        self.publishChanges = publishChanges
    }

    func install(on server: HubServer) {
        server.on(JobCreate.self) { try self.create($0) }
        server.on(JobGet.self) { try self.get($0) }
        server.on(JobList.self) { try self.list($0) }
        context.loop.every(milliseconds: 5) { try self.turn() }
    }

    // MARK: Requests

    func create(_ request: Envelope<JobCreate>) throws -> HubJob {
        let scope = try context.authorize(request, needs: .manage)
        let payload = request.payload
        let output = try Self.path(payload.outputDirectory, "outputDirectory")
        var isDirectory: ObjCBool = false
        if !FileManager.default.fileExists(atPath: output, isDirectory: &isDirectory) {
            do {
                try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
            } catch {
                throw HubError(.invalidArgument, "outputDirectory '\(output)' cannot be made here: \(error.localizedDescription)")
            }
        } else if !isDirectory.boolValue {
            throw HubError(.invalidArgument, "outputDirectory '\(output)' is a file; name a directory")
        }
        guard FileManager.default.isWritableFile(atPath: output) else {
            throw HubError(.invalidArgument, "outputDirectory '\(output)' is not writable by the registration service")
        }
        var input: String?
        if payload.type.imports {
            guard let file = payload.importFile else {
                throw HubError(.invalidArgument, "\(payload.type.rawValue) needs importFile: the path of its input on the registration service's host")
            }
            let path = try Self.path(file, "importFile")
            guard FileManager.default.isReadableFile(atPath: path), FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory),
                !isDirectory.boolValue
            else {
                throw HubError(.invalidArgument, "importFile '\(path)' is not a file the registration service can read")
            }
            input = path
        } else if payload.importFile != nil {
            throw HubError(.invalidArgument, "an export reads no file; leave out importFile")
        }
        let now = Date()
        let job = HubJob(jobId: RandomID.timeOrdered(at: now), type: payload.type, importFile: input, outputDirectory: output, createdAt: now, updatedAt: now)
        try store.createJob(job, hub: scope.qualifier)
        lookAgain = .now
        context.logger.info("job created", ("job", job.jobId), ("type", job.type.rawValue), ("hub", scope.description))
        return job
    }

    func get(_ request: Envelope<JobGet>) throws -> HubJob {
        let scope = try context.authorize(request, needs: .manage)
        guard let stored = try store.job(request.payload.jobId, hub: scope.qualifier) else {
            throw HubError(.notFound, "no job '\(request.payload.jobId)' in this hub")
        }
        return stored.job
    }

    func list(_ request: Envelope<JobList>) throws -> HubJobs {
        let scope = try context.authorize(request, needs: .manage)
        return HubJobs(jobs: try store.jobs(hub: scope.qualifier))
    }

    /// An absolute path, from a path or a `file://` URI.
    static func path(_ given: String, _ field: String) throws -> String {
        var path = given
        if given.hasPrefix("file:") {
            guard let url = URL(string: given), url.isFileURL else {
                throw HubError(.invalidArgument, "\(field) '\(given)' is not a file URI; give an absolute path or file:///path")
            }
            path = url.path
        }
        guard path.hasPrefix("/") else {
            throw HubError(.invalidArgument, "\(field) '\(given)' is not absolute; give an absolute path on the registration service's host, or file:///path")
        }
        return (path as NSString).standardizingPath
    }

    // MARK: Running

    /// One turn: batches of the job under way, until the turn's budget is spent.
    func turn() throws {
        let started = ContinuousClock.now
        while ContinuousClock.now - started < turnBudget {
            if current == nil {
                guard ContinuousClock.now >= lookAgain else { return }
                lookAgain = .now + .seconds(1)
                let now = Date()
                guard let next = try store.claimJob(owner: owner, now: now, until: now.addingTimeInterval(leasePeriod)) else { return }
                current = try start(next)
            }
            guard let running = current else { return }
            do {
                if try !step(running) { current = nil }
            } catch is JobMovedOn {
                // Another process took it over (this one's lease ran out): it goes on there.
                current?.close()
                current = nil
                lookAgain = .now
            } catch let error as HubError where error.code == .unavailable {
                // The store is away: the job is claimed again, from where the store has it, once it is back.
                current?.close()
                current = nil
                throw error
            }
        }
    }

    /// Opens a job's files where the store left it.
    private func start(_ stored: StoredJob) throws -> Running {
        let running = Running(stored: stored)
        if stored.job.status == .started {
            running.stored.job.status = .running
            running.stored.job.updatedAt = Date()
        }
        context.logger.info("job running", ("job", stored.job.jobId), ("type", stored.job.type.rawValue), ("from", stored.offset))
        return running
    }

    /// One batch of the job; false once it has finished.
    private func step(_ running: Running) throws -> Bool {
        do {
            switch running.stored.job.type {
            case .export: return try exportPage(running)
            default: return try importBatch(running)
            }
        } catch let failure as JobFailed {
            try finish(running, failure: failure.reason)
            return false
        }
    }

    // MARK: Imports

    /// Applies lines from where the job is, up to `batchLines` of them or the turn's budget, in one
    /// transaction with the job's new place in its input.
    private func importBatch(_ running: Running) throws -> Bool {
        let reader = try running.reader()
        let from = running.stored.offset
        let lines = try reader.lines(from: from, line: running.nextLine, count: batchLines)
        guard !lines.lines.isEmpty || lines.end > from else {
            try finish(running, failure: nil)
            return false
        }
        var job = running.stored.job
        var next = (offset: lines.end, line: lines.nextLine)
        let scope = running.stored.scope
        // Creates and upserts go to the store together, a statement per table where the engine
        // takes many rows in one; a hub with a limit on its installations counts them one by one.
        let together = job.type != .importDelete && context.hubs.limits(scope).installations == 0
        try store.advance(job.jobId, owner: owner, from: from, until: Date().addingTimeInterval(leasePeriod)) {
            var failures: [JobFailure] = []
            let applied: [(Int, Data, Int64)]
            if together {
                applied = try applyTogether(lines.lines, type: job.type, scope: scope, failures: &failures)
            } else {
                applied = try applyEach(lines.lines, type: job.type, scope: scope, failures: &failures)
            }
            if let last = applied.last, applied.count < lines.lines.count { next = (last.2, last.0 + 1) }
            job.processed += applied.count
            job.applied += applied.count - failures.count
            job.failed += failures.count
            job.progress = reader.size > 0 ? min(100, Double(next.offset) / Double(reader.size) * 100) : 100
            job.updatedAt = Date()
            return (job, failures, next.offset)
        }
        running.stored.job = job
        running.stored.offset = next.offset
        running.nextLine = next.line
        try publishChanges()
        return true
    }

    /// Applies lines one at a time, each in a savepoint of its own, until the turn's time is spent
    /// (so that requests wait no longer); returns the lines it took, those it could not apply
    /// among them, in `failures`.
    private func applyEach(
        _ lines: [(Int, Data, Int64)], type: HubJobType, scope: HubScope, failures: inout [JobFailure]
    ) throws -> [(Int, Data, Int64)] {
        let started = ContinuousClock.now
        var taken = 0
        for (number, line, _) in lines {
            do {
                try apply(line, type: type, scope: scope)
            } catch let error as HubError {
                failures.append(JobFailure(line: number, error))
            }
            taken += 1
            if ContinuousClock.now - started > turnBudget { break }
        }
        return Array(lines.prefix(taken))
    }

    /// Creates or upserts lines together: each read and checked as a Manage key's write would be
    /// (the live ones under their ids read at once), then written at once. The lines it takes end
    /// before the first that names an id taken already in the batch, which the next batch starts
    /// with. Should the write together fail, each line is written alone.
    private func applyTogether(
        _ lines: [(Int, Data, Int64)], type: HubJobType, scope: HubScope, failures: inout [JobFailure]
    ) throws -> [(Int, Data, Int64)] {
        var parsed: [(line: Int, installation: Installation)] = []
        var ids = Set<String>()
        var taken = 0
        for (number, line, _) in lines {
            do {
                let installation = try ImportLine.installation(line)
                guard ids.insert(installation.installationId).inserted else { break }
                parsed.append((number, installation))
            } catch let error as HubError {
                failures.append(JobFailure(line: number, error))
            }
            taken += 1
        }
        let now = Date()
        let current = try store.live(parsed.map { scope.key($0.installation.installationId) }, now: now)
        var ready: [(line: Int, installation: Installation, new: Bool)] = []
        var alone: [(line: Int, installation: Installation)] = []
        for (number, given) in parsed {
            do {
                let existing = current[scope.key(given.installationId)]?.local(in: scope)
                let installation = try handlers.checked(
                    given, current: existing, in: scope, rights: .manage, userToken: nil, creating: type == .importCreate, now: now)
                // Push endpoints are checked against every other installation's as each is written.
                if installation.endpoints != nil {
                    alone.append((number, given))
                } else {
                    ready.append((number, installation.keyed(in: scope), existing == nil))
                }
            } catch let error as HubError {
                failures.append(JobFailure(line: number, error))
            }
        }
        do {
            try store.upsert(all: ready.map(\.installation), now: now)
            for entry in ready where entry.new { handlers.counts.added(in: scope) }
        } catch {
            // Written alone, each line's error is its own; a store that is down fails the batch there.
            alone += ready.map { ($0.line, $0.installation.local(in: scope)) }
        }
        for (number, installation) in alone.sorted(by: { $0.line < $1.line }) {
            do {
                _ = try handlers.save(installation, in: scope, rights: .manage, userToken: nil, creating: type == .importCreate, publish: false)
            } catch let error as HubError {
                failures.append(JobFailure(line: number, error))
            }
        }
        return Array(lines.prefix(taken))
    }

    /// Applies one line as the job's type says, as a Manage key's write would.
    private func apply(_ line: Data, type: HubJobType, scope: HubScope) throws {
        if type == .importDelete {
            let id = try ImportLine.installationId(line)
            guard try store.delete(scope.key(id)) != nil else { throw HubError(.notFound, "no installation '\(id)' to delete") }
            handlers.counts.removed(in: scope)
            return
        }
        let installation = try ImportLine.installation(line)
        _ = try handlers.save(installation, in: scope, rights: .manage, userToken: nil, creating: type == .importCreate, publish: false)
    }

    // MARK: Exports

    private func exportPage(_ running: Running) throws -> Bool {
        let scope = running.stored.scope
        if running.exportTotal == nil {
            running.exportTotal = try store.count(in: scope, now: Date())
            running.stored.job.processed = 0
            running.exportFile = try Self.openForWriting(running.partialOutput)
        }
        let page = try store.list(in: scope, tag: nil, pushChannel: nil, after: running.exportAfter, limit: 1_000, now: Date())
        var text = Data()
        for installation in page.installations {
            text.append(try InstallationJSON.encode(installation.local(in: scope)))
            text.append(UInt8(ascii: "\n"))
        }
        try running.exportFile?.write(contentsOf: text)
        running.stored.job.processed += page.installations.count
        running.exportAfter = page.next
        let total = max(running.exportTotal ?? 0, running.stored.job.processed)
        running.stored.job.progress = total > 0 ? Double(running.stored.job.processed) / Double(total) * 100 : 100
        running.stored.job.applied = running.stored.job.processed
        guard page.next == nil else {
            running.stored.job.updatedAt = Date()
            let job = running.stored.job
            try store.advance(job.jobId, owner: owner, from: 0, until: Date().addingTimeInterval(leasePeriod)) { (job, [], 0) }
            return true
        }
        try running.exportFile?.close()
        running.exportFile = nil
        try finish(running, failure: nil)
        return false
    }

    // MARK: Finishing

    /// Writes the job's files and its last state: completed, or failed with `failure`.
    private func finish(_ running: Running, failure: String?) throws {
        var job = running.stored.job
        job.updatedAt = Date()
        if let failure {
            job.status = .failed
            job.failure = failure
            context.logger.warning("job failed", ("job", job.jobId), ("reason", failure))
        } else {
            let directory = running.outputDirectory
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            if job.type.imports {
                var text = Data()
                for failure in try store.failures(of: job.jobId) {
                    text.append(try HubCodec.makeEncoder().encode(FailedLine(line: failure.line, code: failure.code, message: failure.message)))
                    text.append(UInt8(ascii: "\n"))
                }
                let failed = directory + "/Failed.txt"
                try text.write(to: URL(fileURLWithPath: failed), options: .atomic)
                job.failedFile = failed
            } else {
                let output = directory + "/Output.txt"
                if FileManager.default.fileExists(atPath: output) { try FileManager.default.removeItem(atPath: output) }
                try FileManager.default.moveItem(atPath: running.partialOutput, toPath: output)
                job.outputFile = output
            }
            job.status = .completed
            job.progress = 100
            context.logger.info("job completed", ("job", job.jobId), ("applied", job.applied), ("failed", job.failed))
        }
        try store.updateJob(job)
        running.close()
    }

    private static func openForWriting(_ path: String) throws -> FileHandle {
        let directory = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            guard FileManager.default.createFile(atPath: path, contents: nil) else { throw CocoaError(.fileWriteNoPermission) }
            return try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        } catch {
            throw JobFailed(reason: "the output '\(path)' cannot be written: \(error.localizedDescription)")
        }
    }
}

/// A line of `Failed.txt`.
private struct FailedLine: Encodable {
    var line: Int
    var code: String
    var message: String
}

/// The job as a whole cannot go on: its input cannot be read, or its output written.
struct JobFailed: Error {
    var reason: String
}

/// A job under way, with its files open.
private final class Running {
    var stored: StoredJob
    /// The number of the next line to read, counted from 1 (`reader()` counts the lines before
    /// where a job left off).
    var nextLine = 1
    private var input: InputReader?
    var exportTotal: Int?
    var exportAfter: String?
    var exportFile: FileHandle?

    init(stored: StoredJob) {
        self.stored = stored
    }

    var outputDirectory: String { stored.job.outputDirectory + "/" + stored.job.jobId }
    var partialOutput: String { outputDirectory + "/Output.txt.partial" }

    func reader() throws -> InputReader {
        if let input { return input }
        guard let path = stored.job.importFile else { throw JobFailed(reason: "the job has no input file") }
        let opened = try InputReader(path: path)
        input = opened
        if stored.offset > 0 { nextLine = try opened.lineNumber(at: stored.offset) }
        return opened
    }

    func close() {
        try? exportFile?.close()
        exportFile = nil
        input = nil
    }
}

/// A job's input, read a batch of lines at a time from a byte offset.
final class InputReader {
    let handle: FileHandle
    let size: Int64

    init(path: String) throws {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw JobFailed(reason: "the input '\(path)' cannot be read (moved, deleted, or its rights changed)")
        }
        self.handle = handle
        size = Int64((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)??.int64Value ?? 0)
    }

    /// The line number of the line that starts at `offset`: the newlines before it, plus one.
    func lineNumber(at offset: Int64) throws -> Int {
        try handle.seek(toOffset: 0)
        var count = 1
        var read: Int64 = 0
        while read < offset {
            guard let chunk = try handle.read(upToCount: Int(min(1 << 20, offset - read))), !chunk.isEmpty else { break }
            count += chunk.reduce(0) { $0 + ($1 == UInt8(ascii: "\n") ? 1 : 0) }
            read += Int64(chunk.count)
        }
        return count
    }

    /// Up to `count` lines from `offset`, where line `first` starts (blank ones skipped, though counted), each with its
    /// number and the offset after it, and the offset after the last; a last line without a newline counts only at the
    /// end of the file.
    func lines(from offset: Int64, line first: Int, count: Int) throws -> (lines: [(Int, Data, Int64)], end: Int64, nextLine: Int) {
        try handle.seek(toOffset: UInt64(offset))
        var lines: [(Int, Data, Int64)] = []
        var end = offset
        var number = first
        var pending = Data()
        while lines.count < count {
            guard let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty else {
                // The end of the file: what is left is the last line.
                if !pending.isEmpty {
                    end += Int64(pending.count)
                    lines.append((number, pending, end))
                    number += 1
                }
                break
            }
            pending.append(chunk)
            var start = pending.startIndex
            while lines.count < count, let newline = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
                var line = pending[start..<newline]
                if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                end += Int64(newline - start + 1)
                if !line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { lines.append((number, Data(line), end)) }
                number += 1
                start = newline + 1
            }
            pending = Data(pending[start...])
        }
        return (lines, end, number)
    }
}
