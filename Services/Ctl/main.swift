import Foundation
import ServiceKit

#if canImport(Glibc)
import Glibc
#endif

let exitCode = Ctl.main(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
exit(exitCode)
