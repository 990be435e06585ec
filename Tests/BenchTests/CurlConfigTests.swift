import Foundation
import Testing

@testable import NHBench

/// The curl config files nh-bench push writes for its references.
@Suite("Curl config")
struct CurlConfigTests {
    @Test("values are quoted as curl's parser reads them back")
    func quoting() {
        #expect(CurlConfig.quoted("plain") == #""plain""#)
        #expect(CurlConfig.quoted(#"a "b" \c"#) == #""a \"b\" \\c""#)
        #expect(CurlConfig.quoted("line\nfeed\rreturn\ttab") == #""line\nfeed\rreturn\ttab""#)
        #expect(CurlConfig.quoted("") == #""""#)
        #expect(CurlConfig.quoted("é ✓") == "\"é ✓\"")
    }

    @Test("a switch is its bare name; requests are separated by next, with nothing after the last")
    func lines() {
        #expect(CurlConfig.line(("http2", nil)) == "http2")
        #expect(CurlConfig.line(("header", "apns-topic: com.example.app")) == #"header = "apns-topic: com.example.app""#)
        let text = CurlConfig.text([[("url", "https://a/1"), ("http2", nil)], [("url", "https://a/2")]])
        #expect(text == "url = \"https://a/1\"\nhttp2\nnext\nurl = \"https://a/2\"\n")
    }

    @Test("a request carries its own URL, CA, output, write-out, headers in order and body")
    func request() {
        let raw = CurlConfig.request(
            url: "https://127.0.0.1:1/3/device/ab", headers: [("authorization", "bearer x.y.z"), ("apns-topic", "t")],
            body: .raw(#"{"aps":{"alert":"say \"hi\""}}"#), caFile: "/tmp/ca.pem")
        #expect(raw.map(\.name) == ["url", "cacert", "http2", "output", "user-agent", "write-out", "header", "header", "data-raw"])
        #expect(raw.last?.value == #"{"aps":{"alert":"say \"hi\""}}"#)
        #expect(raw.filter { $0.name == "header" }.map(\.value) == ["authorization: bearer x.y.z", "apns-topic: t"])
        #expect(raw.first { $0.name == "user-agent" }?.value == "")
        #expect(raw.first { $0.name == "write-out" }?.value == "%{response_code} %{num_connects} %{http_version}\n")
        let file = CurlConfig.request(url: "https://h/push/1", headers: [], body: .file("/tmp/b 1"), caFile: "/tmp/ca.pem")
        #expect(file.last?.name == "data-binary" && file.last?.value == "@/tmp/b 1")
    }

    @Test("an HTTP/1.1 request asks for HTTP/1.1 and sends no Expect header, as the hub sends none; HTTP/2 needs no such line")
    func http11() {
        let wns = CurlConfig.request(url: "https://wns.localhost/w/?token=1", headers: [("X-WNS-Type", "wns/toast")], body: .raw("<toast/>"), caFile: "/tmp/ca.pem", http2: false)
        #expect(wns.contains { $0.name == "http1.1" && $0.value == nil })
        #expect(!wns.contains { $0.name == "http2" })
        #expect(wns.filter { $0.name == "header" }.map(\.value) == ["Expect:", "X-WNS-Type: wns/toast"])
        let apns = CurlConfig.request(url: "https://h/3/device/ab", headers: [], body: .raw("{}"), caFile: "/tmp/ca.pem")
        #expect(!apns.contains { $0.name == "header" && $0.value == "Expect:" })
    }

    @Test(
        "curl reads the file back: each request's own output, at a path with quotes, a backslash, a tab and a newline",
        .enabled(if: RepositoryFile.executable(named: "curl") != nil, "needs the curl command"))
    func roundTrip() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("curl-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let source = folder.appendingPathComponent("source.txt")
        try Data("payload\n".utf8).write(to: source)
        let names = [#"odd "quoted" \ name"#, "tab\there\nand a newline"]
        let config = folder.appendingPathComponent("requests.curl")
        try CurlConfig.text(names.map { [("url", source.absoluteString), ("output", folder.appendingPathComponent($0).path)] })
            .write(to: config, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try #require(RepositoryFile.executable(named: "curl")))
        process.arguments = ["--silent", "--show-error", "--config", config.path]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        for name in names {
            #expect(FileManager.default.contents(atPath: folder.appendingPathComponent(name).path) == Data("payload\n".utf8))
        }
    }
}
