import Foundation
import HTTPServer
import HubProtocol
import ServiceKit

/// The operator console (`/console`) and the user inbox (`/inbox`): plain files read once at start
/// from `webRoot`, or from the folder installed beside `nh-gateway`, and served from memory.
/// Nothing on the pages comes from another site, which the Content-Security-Policy enforces.
struct WebPages: Sendable {
    struct File: Sendable {
        let contentType: String
        let body: Data
        let etag: String
    }

    /// By URL path: `/console`, `/inbox`, and `/web/NAME` for the files they load.
    let files: [String: File]
    /// Where the files were looked for, for the error when they are missing.
    let folder: URL

    static let pages = ["console.html": "/console", "inbox.html": "/inbox"]
    static let types = [
        "html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8",
        "svg": "image/svg+xml", "png": "image/png", "ico": "image/x-icon",
    ]
    static let policy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    /// The configured folder; else, for an installed gateway, PREFIX/share/nh/web; else the SwiftPM
    /// resource bundle next to the executable in the build folder.
    static func folder(webRoot: String?, layout: InstallLayout? = InstallLayout.current) -> URL {
        if let webRoot { return URL(fileURLWithPath: webRoot, isDirectory: true) }
        if let layout { return layout.webPages }
        // Without /proc, the path the process was started by.
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            .map { URL(fileURLWithPath: $0) } ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        return executable.deletingLastPathComponent()
            .appendingPathComponent("NotificationHub_NHGateway.resources", isDirectory: true)
            .appendingPathComponent("Web", isDirectory: true)
    }

    /// Reads every file in the folder; `{{hub}}` in a page becomes the hub's name.
    init(folder: URL, hub: String) {
        self.folder = folder
        var files: [String: File] = [:]
        // No folder means no pages: asking for one then says where to put them.
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        for name in names.sorted() {
            let ext = (name as NSString).pathExtension.lowercased()
            guard let type = Self.types[ext], var body = FileManager.default.contents(atPath: folder.appendingPathComponent(name).path)
            else { continue }
            if ext == "html" {
                body = Data(String(decoding: body, as: UTF8.self)
                    .replacingOccurrences(of: "{{hub}}", with: GatewayResponse.escape(hub)).utf8)
            }
            let file = File(contentType: type, body: body, etag: "\"\(String(Self.fnv1a(body), radix: 16))\"")
            files[Self.pages[name] ?? "/web/\(name)"] = file
        }
        self.files = files
    }

    var isInstalled: Bool { files["/console"] != nil }

    /// The file at `path`, or nil when the path is not a web page.
    func serve(_ request: HTTPRequest) throws -> HTTPResponse? {
        var path = request.path
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        // What a browser asks for by itself, beside the icon the pages name.
        if path == "/favicon.ico" { path = "/web/favicon.svg" }
        if path == "/" && request.method == "GET" {
            return HTTPResponse(status: 302, headers: [("Location", "/console")])
        }
        guard path == "/console" || path == "/inbox" || path.hasPrefix("/web/") else { return nil }
        guard request.method == "GET" || request.method == "HEAD" else {
            throw HubError(.invalidArgument, "\(request.method) is not supported on \(path); the pages are read with GET")
        }
        guard let file = files[path] else {
            if !isInstalled {
                throw HubError(.notFound, "the web pages are not installed: copy Services/Gateway/Web to \(folder.path) or set webRoot")
            }
            throw HubError(.notFound, "no page at \(path)")
        }
        var headers = [
            ("Content-Type", file.contentType), ("ETag", file.etag), ("Cache-Control", "no-cache"),
            ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
        ]
        if file.contentType.hasPrefix("text/html") {
            headers += [("Content-Security-Policy", Self.policy), ("X-Frame-Options", "DENY")]
        }
        if request.header("if-none-match") == file.etag { return HTTPResponse(status: 304, headers: headers) }
        return HTTPResponse(status: 200, headers: headers, body: request.method == "HEAD" ? Data() : file.body)
    }

    static func fnv1a(_ data: Data) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in data {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return hash
    }
}
