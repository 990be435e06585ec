import Foundation
import Registrations
import HTTPServer
import HubProtocol

/// A notification's outcome as Notification Hubs answers `GET /{hub}/messages/{id}`: the
/// `<NotificationDetails>` document, with its elements in the order the .NET SDK's serializer
/// requires, and each platform's outcome counts.
enum OutcomeXML {
    static let namespace = RegistrationXML.namespace

    /// The element of each platform's counts, in document order; Linux agents' counts come last, in an element of the hub's own.
    static let countElements: [(Platform, String)] = [
        (.apns, "ApnsOutcomeCounts"), (.wns, "WnsOutcomeCounts"), (.gcm, "GcmOutcomeCounts"), (.adm, "AdmOutcomeCounts"),
        (.fcmv1, "FcmV1OutcomeCounts"), (.baidu, "BaiduOutcomeCounts"), (.browser, "BrowserOutcomeCounts"),
        (.linux, "LinuxOutcomeCounts"),
    ]

    /// The formats of the platforms an outcome has counts for, in document order, as `TargetPlatforms` lists them.
    static func targetPlatforms(_ platforms: [String: [String: Int]]) -> String {
        countElements.filter { platforms[$0.0.rawValue] != nil }.map(\.0.format).joined(separator: ",")
    }

    static func details(_ outcome: NotificationOutcome, location: String) -> HTTPResponse {
        let escape = GatewayResponse.escape
        var xml = #"<?xml version="1.0" encoding="utf-8"?><NotificationDetails xmlns="\#(namespace)" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">"#
        xml += "<NotificationId>\(escape(outcome.notificationId))</NotificationId><Location>\(escape(location))</Location>"
        xml += "<State>\(outcome.state.rawValue)</State><EnqueueTime>\(WireDate.format(outcome.enqueuedAt))</EnqueueTime>"
        if let start = outcome.startedAt { xml += "<StartTime>\(WireDate.format(start))</StartTime>" }
        if let end = outcome.endedAt { xml += "<EndTime>\(WireDate.format(end))</EndTime>" }
        let platforms = outcome.platforms ?? [:]
        xml += "<TargetPlatforms>\(targetPlatforms(platforms))</TargetPlatforms>"
        for (platform, element) in countElements {
            guard let counts = platforms[platform.rawValue] else { continue }
            xml += "<\(element)>"
            for (name, count) in counts.sorted(by: { $0.key < $1.key }) where name != "Targets" && count > 0 {
                xml += "<Outcome><Name>\(escape(name))</Name><Count>\(count)</Count></Outcome>"
            }
            xml += "</\(element)>"
        }
        xml += "</NotificationDetails>"
        return HTTPResponse(status: 200, headers: [("Content-Type", "application/xml; charset=utf-8")], body: Data(xml.utf8))
    }

    /// A test send's `<NotificationOutcome>`: Success and Failure counted over every target, and the
    /// first targets' results. A delivery still unanswered when the wait ends counts as a failure here,
    /// and goes on.
    static func testOutcome(_ outcome: NotificationOutcome?, results: [TestResult], waited: TimeInterval) -> HTTPResponse {
        let escape = GatewayResponse.escape
        let pending = max((outcome?.targets ?? 0) - (outcome?.acknowledged ?? 0) - (outcome?.failed ?? 0) - (outcome?.expired ?? 0), 0)
        let failure = (outcome?.failed ?? 0) + (outcome?.expired ?? 0) + pending
        var xml = #"<?xml version="1.0" encoding="utf-8"?><NotificationOutcome xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="\#(namespace)">"#
        xml += "<Success>\(outcome?.acknowledged ?? 0)</Success><Failure>\(failure)</Failure>"
        if results.isEmpty {
            xml += #"<Results i:nil="true"/>"#
        } else {
            xml += "<Results>"
            for result in results {
                let format = Platform(name: result.platform)?.format ?? result.platform
                let text = result.outcome ?? "No answer from the device within \(Int(waited)) s; the delivery goes on"
                xml += "<RegistrationResult><ApplicationPlatform>\(escape(format))</ApplicationPlatform>"
                xml += "<PnsHandle>\(escape(result.pushChannel))</PnsHandle><RegistrationId>\(escape(result.installationId))</RegistrationId>"
                xml += "<Outcome>\(escape(text))</Outcome></RegistrationResult>"
            }
            xml += "</Results>"
        }
        xml += "</NotificationOutcome>"
        return HTTPResponse(status: 201, headers: [("Content-Type", "application/xml; charset=utf-8")], body: Data(xml.utf8))
    }

    /// Whether the client asked for JSON rather than the XML document.
    static func wantsJSON(_ request: HTTPRequest) -> Bool {
        (request.header("accept") ?? "").lowercased().contains("application/json")
    }
}
