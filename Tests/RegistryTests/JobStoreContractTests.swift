import Foundation
import HubProtocol
import Testing

@testable import NHRegistry

/// What every engine of the registry's store does alike for bulk jobs: one process at a time holds
/// a job, and a batch's writes stand or fall with the job's move through its input.
@Suite("Job store contract")
struct JobStoreContractTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func job(_ id: String, at offset: TimeInterval = 0) -> HubJob {
        HubJob(jobId: id, type: .importCreate, importFile: "/in.txt", outputDirectory: "/out",
               createdAt: now.addingTimeInterval(offset), updatedAt: now.addingTimeInterval(offset))
    }

    @Test("jobs are kept per hub, listed newest first, and claimed oldest first by one owner at a time until its lease runs out",
          arguments: StoreEngine.available)
    func leases(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        try store.createJob(Self.job("j1"), hub: "")
        try store.createJob(Self.job("j2", at: 1), hub: "")
        try store.createJob(Self.job("other", at: 2), hub: "news")
        #expect(try store.jobs(hub: "").map(\.jobId) == ["j2", "j1"])
        #expect(try store.job("other", hub: "")  == nil)
        #expect(try store.job("other", hub: "news")?.scope == HubScope(named: "news"))

        let until = Self.now.addingTimeInterval(10)
        let first = try store.claimJob(owner: "a", now: Self.now, until: until)
        #expect(first?.job.jobId == "j1" && first?.offset == 0)
        // Another owner gets the next job, not the one held.
        #expect(try store.claimJob(owner: "b", now: Self.now, until: until)?.job.jobId == "j2")
        #expect(try store.claimJob(owner: "c", now: Self.now, until: until)?.job.jobId == "other")
        #expect(try store.claimJob(owner: "d", now: Self.now, until: until) == nil)
        // Its holder claims it again; once the lease has run out, anyone may.
        #expect(try store.claimJob(owner: "a", now: Self.now, until: until)?.job.jobId == "j1")
        #expect(try store.claimJob(owner: "d", now: until.addingTimeInterval(1), until: until.addingTimeInterval(10))?.job.jobId == "j1")
        // A finished job is never claimed.
        var done = Self.job("j2", at: 1)
        done.status = .completed
        try store.updateJob(done)
        #expect(try store.claimJob(owner: "e", now: until.addingTimeInterval(100), until: until.addingTimeInterval(110))?.job.jobId == "j1")
        #expect(try store.job("j2", hub: "")?.job.status == .completed)
    }

    @Test("a batch commits with the job's new offset and failures, or not at all; a batch from a stale offset or owner changes nothing",
          arguments: StoreEngine.available)
    func batches(engine: StoreEngine) throws {
        let store = try engine.makeStore()
        try store.createJob(Self.job("j"), hub: "")
        let until = Self.now.addingTimeInterval(10)
        _ = try store.claimJob(owner: "a", now: Self.now, until: until)
        var job = Self.job("j")
        try store.advance("j", owner: "a", from: 0, until: until) {
            _ = try store.upsert(InstallationStoreContractTests.installation("one"), now: Self.now)
            job.applied = 1
            job.failed = 2
            return (job, [JobFailure(line: 9, code: "invalid_tag", message: "nine"), JobFailure(line: 3, code: "conflict", message: "three")], 120)
        }
        #expect(try store.job("j", hub: "")?.offset == 120)
        #expect(try store.job("j", hub: "")?.job.applied == 1)
        #expect(try store.failures(of: "j").map(\.line) == [3, 9])

        // A batch that fails leaves nothing behind: not its writes, not the offset, not its failures.
        struct Broken: Error {}
        #expect(throws: Broken.self) {
            try store.advance("j", owner: "a", from: 120, until: until) {
                _ = try store.upsert(InstallationStoreContractTests.installation("two"), now: Self.now)
                throw Broken()
            }
        }
        #expect(try store.get("two", now: Self.now) == nil && store.job("j", hub: "")?.offset == 120)

        // From an offset the job has passed, or by an owner that lost the lease: refused before anything is applied.
        for (owner, from) in [("a", Int64(0)), ("b", Int64(120))] {
            #expect(throws: JobMovedOn.self) {
                try store.advance("j", owner: owner, from: from, until: until) {
                    _ = try store.upsert(InstallationStoreContractTests.installation("three"), now: Self.now)
                    return (job, [JobFailure(line: 20, code: "x", message: "y")], 240)
                }
            }
        }
        #expect(try store.get("three", now: Self.now) == nil)
        #expect(try store.failures(of: "j").count == 2 && store.job("j", hub: "")?.offset == 120)
    }
}

@Suite("Job input")
struct JobInputTests {
    @Test("lines come in batches with their numbers and end offsets: blank lines and CRLF counted, a last line without a newline kept")
    func lines() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("nh-job-\(UUID().uuidString).txt").path
        try Data("a\r\n\nb\n  \nc\nd".utf8).write(to: URL(fileURLWithPath: path))
        let reader = try InputReader(path: path)
        #expect(reader.size == 12)
        let first = try reader.lines(from: 0, line: 1, count: 2)
        #expect(first.lines.map { $0.0 } == [1, 3] && first.lines.map { String(decoding: $0.1, as: UTF8.self) } == ["a", "b"])
        #expect(first.lines.map { $0.2 } == [3, 6] && first.end == 6 && first.nextLine == 4)
        let rest = try reader.lines(from: first.end, line: first.nextLine, count: 10)
        #expect(rest.lines.map { $0.0 } == [5, 6] && rest.lines.map { String(decoding: $0.1, as: UTF8.self) } == ["c", "d"])
        #expect(rest.end == 12 && rest.lines.last?.2 == 12)
        #expect(try reader.lines(from: 12, line: 7, count: 10).lines.isEmpty)
        // Where a job left off, the line number is counted again from the file.
        #expect(try reader.lineNumber(at: 6) == 4 && reader.lineNumber(at: 0) == 1)
        #expect(throws: JobFailed.self) { try InputReader(path: path + ".missing") }
    }
}
