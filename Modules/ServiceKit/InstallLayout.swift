import Foundation

/// Where an installed executable finds the files installed with it. `make install` and the packages
/// put the executables in PREFIX/bin, the web pages in PREFIX/share/nh/web and the config in a
/// config folder:
/// - `/etc/nh` for the prefixes `/usr` and `/usr/local`;
/// - `ROOT/etc/nh` for a prefix `ROOT/usr`, such as a package unpacked into a folder;
/// - `PREFIX/etc/nh` for any other prefix.
///
/// An executable that is not in a folder named `bin`, such as one in the build folder, is not installed.
public struct InstallLayout: Equatable, Sendable {
    public let prefix: URL

    public init?(executable: URL) {
        let folder = executable.deletingLastPathComponent()
        guard folder.lastPathComponent == "bin" else { return nil }
        prefix = folder.deletingLastPathComponent().standardizedFileURL
    }

    /// The layout of this process's executable, found through /proc/self/exe (so through any link
    /// it was started by), or nil when it is not installed.
    public static let current: InstallLayout? = {
        // Absent without /proc: the process is taken as not installed.
        guard let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return nil }
        return InstallLayout(executable: URL(fileURLWithPath: path))
    }()

    public var configFolder: URL {
        let path = prefix.path
        if path == "/usr" || path == "/usr/local" { return URL(fileURLWithPath: "/etc/nh", isDirectory: true) }
        if prefix.lastPathComponent == "usr" {
            return prefix.deletingLastPathComponent().appendingPathComponent("etc/nh", isDirectory: true)
        }
        return prefix.appendingPathComponent("etc/nh", isDirectory: true)
    }

    public var webPages: URL { prefix.appendingPathComponent("share/nh/web", isDirectory: true) }
}
