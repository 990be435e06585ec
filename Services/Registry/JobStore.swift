import Foundation
import HubProtocol
import ServiceKit
import Storage
import StoreEngines

/// A bulk job as the store keeps it: the job, the hub it belongs to (its qualifier; empty for the
/// default hub), and how far into its input it has read and applied.
struct StoredJob: Equatable {
    var job: HubJob
    var hub: String
    var offset: Int64

    var scope: HubScope { HubScope(named: hub.isEmpty ? nil : hub) }
}

/// A line of a job's input that could not be applied.
struct JobFailure: Equatable {
    var line: Int
    var code: String
    var message: String
}

extension JobFailure {
    /// Line `line`, refused with `error`.
    init(line: Int, _ error: HubError) {
        self.init(line: line, code: error.code.rawValue, message: error.message)
    }
}

/// Another process moved the job on first (several registry processes share a store): this
/// batch was rolled back whole, and the job goes on from where the store says.
struct JobMovedOn: Error {}

/// The jobs' part of the registry's store (`JobRunner`). Where several registry processes share
/// the store, one at a time runs a job: it holds the job's lease, renewed by each batch, and
/// another takes the job over only once the lease has run out.
protocol JobStore: AnyObject {
    func createJob(_ job: HubJob, hub: String) throws
    func job(_ id: String, hub: String) throws -> StoredJob?
    /// A hub's jobs, newest first.
    func jobs(hub: String) throws -> [HubJob]
    /// Takes the lease of the oldest job not finished whose lease is free, has run out or is
    /// `owner`'s already, until `until`; nil when there is none.
    func claimJob(owner: String, now: Date, until: Date) throws -> StoredJob?
    /// Runs `body` (a batch's writes) in one transaction with what it returns: the job with its
    /// new counts, the lines it could not apply, and the offset in its input after its last line.
    /// The job must still be at `from` under `owner`'s lease, which the batch renews until
    /// `until`. All or nothing, so a line is applied once however often its batch is tried.
    /// Throws `JobMovedOn` when the job is no longer `owner`'s at `from`.
    func advance(_ jobId: String, owner: String, from: Int64, until: Date, _ body: () throws -> (HubJob, [JobFailure], Int64)) throws
    /// Writes the job as it is now (its status, its progress, its files).
    func updateJob(_ job: HubJob) throws
    /// The lines that could not be applied, in line order.
    func failures(of jobId: String) throws -> [JobFailure]
}

extension InstallationEngine {
    private var jobs: String { Self.sql.prefix + "jobs" }
    private var jobFailures: String { Self.sql.prefix + "job_failures" }
    private func spell(_ statement: String) -> String { Self.sql.spell(statement) }

    func createJob(_ job: HubJob, hub: String) throws {
        try run(spell("INSERT INTO \(jobs) (job_id, hub, created_at, document, input_offset, finished) VALUES ($1, $2, $3, $4, 0, $5)"),
                [job.jobId, hub, job.createdAt, try encoder.encode(job), job.status.finished])
    }

    func job(_ id: String, hub: String) throws -> StoredJob? {
        try one(spell("SELECT document, hub, input_offset FROM \(jobs) WHERE job_id = $1 AND hub = $2"), [id, hub]).map(storedJob)
    }

    func jobs(hub: String) throws -> [HubJob] {
        try query(spell("SELECT document, hub, input_offset FROM \(jobs) WHERE hub = $1 ORDER BY created_at DESC, job_id DESC"), [hub])
            .map { try storedJob($0).job }
    }

    func claimJob(owner: String, now: Date, until: Date) throws -> StoredJob? {
        // Read without a lock first: a job another process runs is skipped without waiting for its batch.
        let free = try query(spell("""
            SELECT job_id FROM \(jobs) WHERE finished = $1 AND (owner IS NULL OR owner = $2 OR lease_until < $3) ORDER BY created_at, job_id LIMIT 1
            """), [false, owner, now])
        guard let id = try free.first?.string("job_id", of: "jobs") else { return nil }
        return try one(spell("""
            UPDATE \(jobs) SET owner = $1, lease_until = $2
            WHERE job_id = $3 AND finished = $4 AND (owner IS NULL OR owner = $1 OR lease_until < $5)
            RETURNING document, hub, input_offset
            """), [owner, until, id, false, now]).map(storedJob)
    }

    func advance(_ jobId: String, owner: String, from: Int64, until: Date, _ body: () throws -> (HubJob, [JobFailure], Int64)) throws {
        try transaction {
            // First, so that on PostgreSQL the job's row is locked before anything is applied.
            guard try run(spell("UPDATE \(jobs) SET lease_until = $1 WHERE job_id = $2 AND input_offset = $3 AND owner = $4 AND finished = $5"),
                          [until, jobId, from, owner, false]) == 1
            else { throw JobMovedOn() }
            let (job, failures, to) = try body()
            for failure in failures {
                try run(spell("INSERT INTO \(jobFailures) (job_id, line, code, message) VALUES ($1, $2, $3, $4)"),
                        [jobId, Int64(failure.line), failure.code, failure.message])
            }
            try run(spell("UPDATE \(jobs) SET document = $1, input_offset = $2 WHERE job_id = $3"), [try encoder.encode(job), to, jobId])
            FaultPoint.reach(.jobBatch)
        }
    }

    func updateJob(_ job: HubJob) throws {
        try run(spell("UPDATE \(jobs) SET document = $1, finished = $2 WHERE job_id = $3"), [try encoder.encode(job), job.status.finished, job.jobId])
    }

    func failures(of jobId: String) throws -> [JobFailure] {
        try query(spell("SELECT line, code, message FROM \(jobFailures) WHERE job_id = $1 ORDER BY line"), [jobId]).map {
            JobFailure(line: try $0.int("line", of: "job_failures"), code: try $0.string("code", of: "job_failures"),
                       message: try $0.string("message", of: "job_failures"))
        }
    }

    private func storedJob(_ row: Row) throws -> StoredJob {
        StoredJob(job: try decoder.decode(HubJob.self, from: try row.data("document", of: "jobs")), hub: try row.string("hub", of: "jobs"),
                  offset: try row.int64("input_offset", of: "jobs"))
    }
}
