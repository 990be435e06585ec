import Foundation
import HubProtocol
import ServiceKit

/// nhctl installations: list, show and delete.
enum CtlInstallations {
    static func run(_ parsed: Arguments, config: HubConfig, environment: [String: String]) -> Int32 {
        let words = Array(parsed.positionals.dropFirst())
        guard let command = words.first else { return Ctl.fail("usage: nhctl installations list|show ID|delete ID") }
        do {
            let registry = try CtlCaller(parsed, config: config, environment: environment).client(config.registry.requests)
            defer { registry.close() }
            let encoder = HubCodec.makeEncoder()
            switch (command, words.count) {
            case ("list", 1):
                let top = parsed[option: "top"].flatMap(Int.init) ?? 100
                var after: String?
                var shown = 0
                repeat {
                    let page = try registry.call(InstallationList(
                        tag: parsed[option: "tag"], pushChannel: parsed[option: "channel"], limit: min(top - shown, 1000), after: after))
                    for installation in page.installations {
                        if parsed.has("json") {
                            print(String(decoding: try encoder.encode(installation), as: UTF8.self))
                        } else {
                            print("\(installation.installationId)  \(installation.platform)  \(installation.tags.joined(separator: ","))"
                                + (installation.userId.map { "  user \($0)" } ?? ""))
                        }
                    }
                    shown += page.installations.count
                    after = page.next
                } while after != nil && shown < top
                return 0
            case ("show", 2):
                let reply = try registry.call(InstallationGet(installationId: words[1]))
                // The installation, with where it is served beside it when a dispatcher answers.
                var object = JSONValue.parse(try encoder.encode(reply.installation))?.objectValue ?? [:]
                switch placement(words[1], parsed, config, environment) {
                case .success(let placement): object["placement"] = JSONValue.parse(try encoder.encode(placement))
                case .failure(let error): FileHandle.standardError.write(Data("nhctl: where it is served is not known: \(error)\n".utf8))
                }
                encoder.outputFormatting.insert(.prettyPrinted)
                let text = try encoder.encode(JSONValue.object(object))
                print(String(decoding: text, as: UTF8.self))
                return 0
            case ("delete", 2):
                _ = try registry.call(InstallationDelete(installationId: words[1]))
                print(parsed.has("json") ? #"{"deleted":"\#(words[1])"}"# : "deleted \(words[1])")
                return 0
            default:
                return Ctl.fail("usage: nhctl installations list [--tag T] [--channel HANDLE] [--top N] | show ID | delete ID")
            }
        } catch {
            return CtlSend.report(error)
        }
    }

    /// Where the installation is served, as the configured dispatcher knows it.
    static func placement(_ id: String, _ parsed: Arguments, _ config: HubConfig, _ environment: [String: String]) -> Result<Placement, Error> {
        Result {
            let dispatcher = try CtlCaller(parsed, config: config, environment: environment).client(config.dispatch.requests)
            defer { dispatcher.close() }
            return try dispatcher.call(PlacementRequest(installationId: id))
        }
    }
}
