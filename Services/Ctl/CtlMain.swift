import Foundation
import ServiceKit
#if canImport(Glibc)
import Glibc
#endif

/// `nhctl`'s entry point, called by its executable and by `nh-services` (Services/Executables).
public enum CtlMain {
    public static func main(_ arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> Never {
        let exitCode = Ctl.main(arguments, environment: ProcessInfo.processInfo.environment)
        exit(exitCode)
    }
}
