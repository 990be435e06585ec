import Foundation

/// What a bulk job does, named as Notification Hubs names it.
public enum HubJobType: String, Codable, Sendable, CaseIterable {
    /// Creates each installation of the input; one whose id is taken fails (`conflict`).
    case importCreate = "ImportCreateRegistrations"
    /// Creates or replaces each installation of the input.
    case importUpsert = "ImportUpsertRegistrations"
    /// Deletes each installation of the input; one not there fails (`not_found`).
    case importDelete = "ImportDeleteRegistrations"
    /// Writes every installation of the hub, one JSON object per line.
    case export = "ExportRegistrations"

    public var imports: Bool { self != .export }
}

public enum HubJobStatus: String, Codable, Sendable {
    case started = "Started"
    case running = "Running"
    case completed = "Completed"
    case failed = "Failed"

    public var finished: Bool { self == .completed || self == .failed }
}

/// Starts a bulk job on the hub. Its files are paths on the host of the registration service
/// (the gateway's host in every layout the project ships): the input is read from there, and the
/// output written into `outputDirectory`, under the job's id. A Manage key.
public struct JobCreate: HubRequest {
    public typealias Reply = HubJob
    public static let messageType: MessageType = "job.create"
    public var type: HubJobType
    /// The input of an import: an absolute path, or a `file://` URI. Each line is an installation
    /// as JSON (`{"installationId": …}`), or a registration description as XML
    /// (`<AppleRegistrationDescription>…`, bare or in an Atom entry).
    public var importFile: String?
    /// Where the job writes `{jobId}/Output.txt` (an export) and `{jobId}/Failed.txt` (the lines
    /// an import could not apply, each with its line number, code and reason).
    public var outputDirectory: String
    public init(type: HubJobType, importFile: String? = nil, outputDirectory: String) {
        self.type = type
        self.importFile = importFile
        self.outputDirectory = outputDirectory
    }
}

/// A job of the hub, by the id `JobCreate` gave it. A Manage key.
public struct JobGet: HubRequest {
    public typealias Reply = HubJob
    public static let messageType: MessageType = "job.get"
    public var jobId: String
    public init(jobId: String) { self.jobId = jobId }
}

/// The hub's jobs, newest first. A Manage key.
public struct JobList: HubRequest {
    public typealias Reply = HubJobs
    public static let messageType: MessageType = "job.list"
    public init() {}
}

public struct HubJobs: HubMessage {
    public static let messageType: MessageType = "job.list.reply"
    public var jobs: [HubJob]
    public init(jobs: [HubJob]) { self.jobs = jobs }
}

/// A bulk job and how far it has come.
public struct HubJob: HubMessage, Equatable {
    public static let messageType: MessageType = "job.reply"
    public var jobId: String
    public var type: HubJobType
    public var status: HubJobStatus
    /// Percent done: of the input's bytes for an import, of the installations for an export.
    public var progress: Double
    public var importFile: String?
    public var outputDirectory: String
    public var createdAt: Date
    public var updatedAt: Date
    /// Lines read (an import) or installations written (an export) so far.
    public var processed: Int
    /// Lines applied.
    public var applied: Int
    /// Lines that could not be applied, each listed in `failedFile`.
    public var failed: Int
    /// Why the job as a whole failed, as when its input cannot be read.
    public var failure: String?
    /// The files written, once the job has finished: Azure's `OutputProperties`.
    public var outputFile: String?
    public var failedFile: String?

    public init(
        jobId: String, type: HubJobType, status: HubJobStatus = .started, progress: Double = 0, importFile: String?,
        outputDirectory: String, createdAt: Date, updatedAt: Date, processed: Int = 0, applied: Int = 0, failed: Int = 0,
        failure: String? = nil, outputFile: String? = nil, failedFile: String? = nil
    ) {
        self.jobId = jobId
        self.type = type
        self.status = status
        self.progress = progress
        self.importFile = importFile
        self.outputDirectory = outputDirectory
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.processed = processed
        self.applied = applied
        self.failed = failed
        self.failure = failure
        self.outputFile = outputFile
        self.failedFile = failedFile
    }
}
