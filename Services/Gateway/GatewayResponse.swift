import Foundation
import Registrations
import HTTPServer
import HubProtocol

/// Responses in the shapes the Notification Hubs REST API uses.
enum GatewayResponse {
    static func status(for code: ErrorCode) -> Int {
        switch code {
        case .unauthorized: return 401
        case .forbidden: return 403
        case .notFound: return 404
        case .conflict: return 409
        case .historyRewound: return 410
        case .preconditionFailed: return 412
        case .payloadTooLarge: return 413
        case .rateLimited: return 429
        case .timeout, .unavailable: return 503
        case .internal: return 500
        default: return 400
        }
    }

    /// `<Error><Code>400</Code><Detail>…</Detail></Error>`, as the service answers errors.
    static func error(_ error: HubError) -> HTTPResponse {
        let status = status(for: error.code)
        let body = "<Error><Code>\(status)</Code><Detail>\(escape(error.code.rawValue)): \(escape(error.message))</Detail></Error>"
        var headers = [("Content-Type", "application/xml; charset=utf-8")]
        if [.rateLimited, .unavailable, .timeout].contains(error.code) { headers.append(("Retry-After", "1")) }
        return HTTPResponse(status: status, headers: headers, body: Data(body.utf8))
    }

    static func json(_ status: Int, _ data: Data, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: data)
    }


    static func empty(_ status: Int, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: headers)
    }

    static func escape(_ text: String) -> String { RegistrationXML.escape(text) }
}
