import ServiceKit
import Testing

@testable import NHCtl

/// nhctl's decisions that need no service: the health check's exit code, template properties, and
/// a usage text that names every option.
@Suite("nhctl")
struct CtlTests {
    static func line(_ service: String, _ status: String) -> Ctl.HealthLine {
        Ctl.HealthLine(service: service, endpoint: "tcp://127.0.0.1:1", status: status)
    }

    static let services = ["nh-registry", "nh-sync", "nh-dispatch", "nh-publish", "nh-gateway"].map { line($0, "ok") }

    @Test("health lines keep every endpoint whole, however long, in columns that line up")
    func healthTable() {
        let long = "ipc:///tmp/nh-agent-1000/data/agent/control.sock"
        var agent = Ctl.HealthLine(service: "nh-agent", endpoint: long, status: Ctl.absentAgent)
        agent.error = "no local agent answers"
        var publish = Ctl.HealthLine(service: "nh-publish", endpoint: "tcp://127.0.0.1:7710", status: "ok")
        publish.pid = 42
        publish.uptimeSeconds = 3
        let rows = Ctl.healthTable([publish, agent])
        #expect(rows[1].contains(long + " no local agent answers"))
        #expect(rows[0].hasPrefix("nh-publish ok   tcp://127.0.0.1:7710") && rows[0].hasSuffix(" pid 42, up 3.0s"))
        #expect(rows[0].range(of: "pid")?.lowerBound.utf16Offset(in: rows[0]) == rows[1].range(of: "no local")?.lowerBound.utf16Offset(in: rows[1]))
    }

    @Test("an absent local agent fails the health check only when asked for")
    func absentAgent() {
        let absent = Self.services + [Self.line("nh-agent", Ctl.absentAgent)]
        #expect(Ctl.healthExitCode(absent, requireAgent: false) == 0)
        #expect(Ctl.healthExitCode(absent, requireAgent: true) == 1)
        let running = Self.services + [Self.line("nh-agent", "ok")]
        #expect(Ctl.healthExitCode(running, requireAgent: true) == 0)
    }

    @Test("a service that is down, or an agent that answers badly, always fails it")
    func failures() {
        let down = [Self.line("nh-sync", "down")] + Self.services.dropFirst(2) + [Self.line("nh-agent", Ctl.absentAgent)]
        #expect(Ctl.healthExitCode(down, requireAgent: false) == 1)
        #expect(Ctl.healthExitCode([Self.line("nh-publish", Ctl.absentAgent)], requireAgent: false) == 1)
        #expect(Ctl.healthExitCode(Self.services + [Self.line("nh-agent", "down")], requireAgent: false) == 1)
        #expect(Ctl.healthExitCode(Self.services + [Self.line("nh-agent", "wrong service: nh-sync")], requireAgent: false) == 1)
    }

    @Test("NAME=VALUE arguments become template properties; the value may be empty or hold =")
    func properties() throws {
        #expect(try CtlSend.properties(["messageParam=Breaking World News!", "empty=", "query=a=b"])
            == ["messageParam": "Breaking World News!", "empty": "", "query": "a=b"])
    }

    @Test("an argument with an empty NAME, or with no =, is refused and named")
    func badProperties() {
        #expect(throws: Arguments.Error.self) { try CtlSend.properties(["=x"]) }
        #expect(throws: Arguments.Error.self) { try CtlSend.properties(["title=ok", "="]) }
        #expect(throws: Arguments.Error.self) { try CtlSend.properties(["messageParam"]) }
        do {
            _ = try CtlSend.properties(["title=ok", "=x"])
        } catch {
            #expect(error.description.contains("'=x' has an empty property name"))
        }
    }

    @Test("the usage names every option nhctl accepts, as --name")
    func usageNamesEveryOption() {
        let words = Set(Ctl.usage.split(whereSeparator: { !($0.isLetter || $0 == "-") }).map(String.init))
        let options = Ctl.valuedOptions.union(Ctl.flagOptions).union(["help"])
        #expect(options.filter { !words.contains("--" + $0) }.sorted() == [])
    }
}
