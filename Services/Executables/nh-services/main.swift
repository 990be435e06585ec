import Foundation
import NHCtl
import NHDispatch
import NHGateway
import NHPublish
import NHRegistry
import NHSync
import ServiceKit

// Every service and nhctl in one executable, for the packages: started as `nh-dispatch` (a link to
// it) it is the dispatcher, and `nh-services dispatch ARGS` is the same. One copy of the Swift
// runtime and Foundation serves them all.
let entries: [(name: String, main: ([String]) -> Never)] = [
    ("nh-registry", RegistryMain.main), ("nh-publish", PublishMain.main), ("nh-dispatch", DispatchMain.main),
    ("nh-sync", SyncMain.main), ("nh-gateway", GatewayMain.main), ("nhctl", CtlMain.main),
]
var arguments = CommandLine.arguments
let called = URL(fileURLWithPath: arguments.removeFirst()).lastPathComponent
@MainActor func entry(_ name: String) -> (([String]) -> Never)? {
    entries.first { $0.name == name || $0.name == "nh-" + name || ($0.name == "nhctl" && name == "ctl") }?.main
}
if let main = entry(called) { main(arguments) }
if let first = arguments.first, let main = entry(first) { main(Array(arguments.dropFirst())) }
let names = entries.map(\.name).joined(separator: ", ")
if arguments.first == "--version" {
    print("nh-services \(HubVersion.description)")
    exit(0)
}
if let first = arguments.first, !["--help", "-h", "help"].contains(first) {
    FileHandle.standardError.write(Data("nh-services: unknown service '\(first)'; the services are \(names)\n".utf8))
    exit(2)
}
print("""
    nh-services: every notification hub service and nhctl in one executable

    Usage: nh-services SERVICE [ARGUMENTS]    (SERVICE: \(names), or registry, publish, …)
           nh-services --version | --help
           or started through a link named after the service, such as nh-dispatch

    Each service's own --help says what it takes.
    """)
exit(arguments.isEmpty ? 2 : 0)
