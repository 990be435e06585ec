import Foundation
import ServiceKit
import Testing

@Suite("Install layout")
struct InstallLayoutTests {
    func layout(_ executable: String) -> InstallLayout? { InstallLayout(executable: URL(fileURLWithPath: executable)) }

    @Test("an executable in a bin folder is installed, one in the build folder is not")
    func installed() {
        #expect(layout("/usr/bin/nh-services")?.prefix.path == "/usr")
        #expect(layout("/opt/nh/bin/nhctl")?.prefix.path == "/opt/nh")
        #expect(layout("/work/hub/.build/debug/nh-dispatch") == nil)
        #expect(layout("/work/hub/.build/static/release/nh-services") == nil)
    }

    @Test("the config folder: /etc/nh for /usr and /usr/local, ROOT/etc/nh for ROOT/usr, else PREFIX/etc/nh")
    func configFolder() {
        #expect(layout("/usr/bin/nh-dispatch")?.configFolder.path == "/etc/nh")
        #expect(layout("/usr/local/bin/nh-dispatch")?.configFolder.path == "/etc/nh")
        #expect(layout("/tmp/unpacked/usr/bin/nh-dispatch")?.configFolder.path == "/tmp/unpacked/etc/nh")
        #expect(layout("/opt/nh/bin/nh-dispatch")?.configFolder.path == "/opt/nh/etc/nh")
        #expect(layout("/usr/bin/nh-gateway")?.webPages.path == "/usr/share/nh/web")
        #expect(layout("/opt/nh/bin/nh-gateway")?.webPages.path == "/opt/nh/share/nh/web")
    }

    @Test("the config file: --config, then NH_CONFIG (empty: none), then the installed one when it exists")
    func configFile() throws {
        let prefix = FileManager.default.temporaryDirectory.appendingPathComponent("nh-layout-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: prefix) }
        let installed = try #require(InstallLayout(executable: prefix.appendingPathComponent("bin/nhctl")))
        #expect(ConfigLoader.file(option: nil, environment: [:], layout: installed) == nil)
        try FileManager.default.createDirectory(at: installed.configFolder, withIntermediateDirectories: true)
        let hub = installed.configFolder.appendingPathComponent("hub.json")
        try Data("{}".utf8).write(to: hub)
        #expect(ConfigLoader.file(option: nil, environment: [:], layout: installed) == hub.path)
        #expect(ConfigLoader.file(option: nil, environment: [:], installedName: "agent.json", layout: installed) == nil)
        #expect(ConfigLoader.file(option: nil, environment: ["NH_CONFIG": "/srv/nh.json"], layout: installed) == "/srv/nh.json")
        #expect(ConfigLoader.file(option: nil, environment: ["NH_CONFIG": ""], layout: installed) == nil)
        #expect(ConfigLoader.file(option: "/x.json", environment: ["NH_CONFIG": "/srv/nh.json"], layout: installed) == "/x.json")
        #expect(ConfigLoader.file(option: nil, environment: [:], layout: nil) == nil)
    }
}
