import Foundation
import FoundationXML
import HTTPServer
import HubProtocol
import Registrations

/// `/{hub}/jobs`: bulk jobs as Notification Hubs takes them, an Atom entry holding a
/// `NotificationHubJob`, answered the same way. Where Azure reads and writes blob storage, the
/// hub reads `ImportFileUri` and writes into `OutputContainerUri` as paths on the registration
/// service's host (`file:///…`, or a bare absolute path), which in the layouts the project ships
/// is this gateway's host. A JSON body (`{"type", "importFileUri", "outputContainerUri"}`) is
/// taken too, and `Accept: application/json` answers the job as JSON.
struct JobRoutes {
    let services: GatewayServices

    static let fields: Set<String> = ["Type", "ImportFileUri", "OutputContainerUri", "JobId", "Progress", "Status", "Failure", "CreatedAt", "UpdatedAt", "OutputProperties"]

    func create(_ request: HTTPRequest) throws -> HTTPResponse {
        let given = try Self.parse(request)
        guard let typeName = given["Type"], let type = HubJobType(rawValue: typeName) else {
            throw HubError(.invalidArgument, "Type must be one of \(HubJobType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let output = given["OutputContainerUri"], !output.isEmpty else {
            throw HubError(.invalidArgument, "OutputContainerUri is needed: a directory on the registration service's host (file:///path) for the job's files")
        }
        let job = try services.registry.call(JobCreate(type: type, importFile: given["ImportFileUri"].flatMap { $0.isEmpty ? nil : $0 }, outputDirectory: output))
        var response = respond(job, request, status: 201)
        response.headers.append(("Location", "\(services.hubURL(request))/jobs/\(job.jobId)?api-version=2015-01"))
        return response
    }

    func get(_ id: String, _ request: HTTPRequest) throws -> HTTPResponse {
        respond(try services.registry.call(JobGet(jobId: id)), request, status: 200)
    }

    func list(_ request: HTTPRequest) throws -> HTTPResponse {
        let jobs = try services.registry.call(JobList()).jobs
        if Self.wantsJSON(request) { return GatewayResponse.json(200, try HubCodec.makeEncoder().encode(jobs)) }
        let base = services.hubURL(request)
        let body = """
            <?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">\
            <title type="text">Jobs</title><id>\(GatewayResponse.escape(base))/jobs</id><updated>\(WireDate.format(Date()))</updated>\
            \(jobs.map { Self.entryXML($0, base: base) }.joined())</feed>
            """
        return HTTPResponse(status: 200, headers: [("Content-Type", "application/atom+xml;type=feed;charset=utf-8")], body: Data(body.utf8))
    }

    private func respond(_ job: HubJob, _ request: HTTPRequest, status: Int) -> HTTPResponse {
        if Self.wantsJSON(request), let data = try? HubCodec.makeEncoder().encode(job) { return GatewayResponse.json(status, data) }
        return HTTPResponse(
            status: status, headers: [("Content-Type", "application/atom+xml;type=entry;charset=utf-8")],
            body: Data(("<?xml version=\"1.0\" encoding=\"utf-8\"?>" + Self.entryXML(job, base: services.hubURL(request))).utf8))
    }

    private static func wantsJSON(_ request: HTTPRequest) -> Bool {
        (request.header("accept") ?? "").lowercased().contains("application/json")
    }

    /// The job's fields from the body: the elements of its `NotificationHubJob`, or a JSON object's
    /// members by the same names (in any case).
    static func parse(_ request: HTTPRequest) throws -> [String: String] {
        let body = request.body
        if body.first(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }) == UInt8(ascii: "{") {
            guard let object = JSONValue.parse(body)?.objectValue else { throw HubError(.invalidPayload, "the body is not a JSON object") }
            var fields: [String: String] = [:]
            for (key, value) in object {
                guard let name = Self.fields.first(where: { $0.lowercased() == key.lowercased() }) else {
                    throw HubError(.unknownField, "a job has no field '\(key)'; give type, importFileUri and outputContainerUri")
                }
                guard let text = value.stringValue else { throw HubError(.invalidArgument, "'\(key)' must be a string") }
                fields[name] = text
            }
            return fields
        }
        let reader = JobReader()
        let parser = XMLParser(data: body)
        parser.shouldProcessNamespaces = true
        parser.shouldResolveExternalEntities = false
        parser.delegate = reader
        guard parser.parse(), reader.found else {
            throw HubError(
                .invalidPayload,
                "the body needs <entry><content type=\"application/xml\"><NotificationHubJob> with <Type>, <ImportFileUri> and <OutputContainerUri>")
        }
        if let unknown = reader.fields.keys.first(where: { !Self.fields.contains($0) }) {
            throw HubError(.unknownField, "a NotificationHubJob has no <\(unknown)>; give Type, ImportFileUri and OutputContainerUri")
        }
        return reader.fields
    }

    /// The job as Notification Hubs writes it: its members in the order its SDK reads them, the
    /// files and the counts of lines in `OutputProperties`.
    static func entryXML(_ job: HubJob, base: String) -> String {
        let escape = GatewayResponse.escape
        let link = escape("\(base)/jobs/\(job.jobId)?api-version=2015-01")
        var properties: [(String, String)] = [
            ("ProcessedLines", String(job.processed)), ("AppliedLines", String(job.applied)), ("FailedLines", String(job.failed)),
        ]
        if let file = job.outputFile { properties.insert(("OutputFilePath", "file://" + file), at: 0) }
        if let file = job.failedFile { properties.insert(("FailedFilePath", "file://" + file), at: 0) }
        let arrays = "http://schemas.microsoft.com/2003/10/Serialization/Arrays"
        var xml = #"<NotificationHubJob xmlns="\#(RegistrationXML.namespace)" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">"#
        xml += "<CreatedAt>\(WireDate.format(job.createdAt))</CreatedAt>"
        if let failure = job.failure { xml += "<Failure>\(escape(failure))</Failure>" }
        if let file = job.importFile { xml += "<ImportFileUri>\(escape("file://" + file))</ImportFileUri>" }
        xml += "<JobId>\(escape(job.jobId))</JobId>"
        xml += "<OutputContainerUri>\(escape("file://" + job.outputDirectory))</OutputContainerUri>"
        xml += #"<OutputProperties xmlns:d3p1="\#(arrays)">"#
            + properties.map { "<d3p1:KeyValueOfstringstring><d3p1:Key>\($0.0)</d3p1:Key><d3p1:Value>\(escape($0.1))</d3p1:Value></d3p1:KeyValueOfstringstring>" }.joined()
            + "</OutputProperties>"
        xml += "<Progress>\(String(format: "%.2f", job.progress))</Progress>"
        xml += "<Status>\(job.status.rawValue)</Status><Type>\(job.type.rawValue)</Type>"
        xml += "<UpdatedAt>\(WireDate.format(job.updatedAt))</UpdatedAt></NotificationHubJob>"
        return """
            <entry xmlns="http://www.w3.org/2005/Atom"><id>\(link)</id><title type="text">\(escape(job.jobId))</title>\
            <published>\(WireDate.format(job.createdAt))</published><updated>\(WireDate.format(job.updatedAt))</updated>\
            <link rel="self" href="\(link)"/><content type="application/xml">\(xml)</content></entry>
            """
    }
}

/// Reads the members of a `NotificationHubJob`, wherever it is in the body.
private final class JobReader: NSObject, XMLParserDelegate {
    var fields: [String: String] = [:]
    var found = false
    private var depth: Int?
    private var level = 0
    private var text = ""

    func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
        level += 1
        text = ""
        if depth == nil, name == "NotificationHubJob" {
            depth = level
            found = true
        }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }

    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
        if let depth, level == depth + 1 { fields[name] = text.trimmingCharacters(in: .whitespacesAndNewlines) }
        if level == depth { depth = nil }
        level -= 1
        text = ""
    }
}
