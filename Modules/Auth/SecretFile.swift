import Foundation

/// A file made once with fresh content and then only read, safe when several processes start at
/// once: the content is written aside and linked into place, and a process that loses the race
/// reads the winner's file.
public enum SecretFile {
    public static func loadOrCreate(_ url: URL, make: () throws -> Data) throws -> Data {
        if let data = FileManager.default.contents(atPath: url.path) { return data }
        // Another process may have just made it: read once more before calling it unreadable.
        if FileManager.default.fileExists(atPath: url.path) {
            if let data = FileManager.default.contents(atPath: url.path) { return data }
            let reason = access(url.path, R_OK) == 0 ? "it cannot be read" : String(cString: strerror(errno))
            throw AuthError(
                .unauthorized,
                "\(url.path) exists but \(reason); fix its owner or mode (0600, owned by the service's user), or restore it from another host of this hub")
        }
        let temporary = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent)-\(getpid())-\(UUID().uuidString)")
        guard FileManager.default.createFile(atPath: temporary.path, contents: try make(), attributes: [.posixPermissions: 0o600]) else {
            throw AuthError(.unauthorized, "cannot write \(temporary.path)")
        }
        defer { unlink(temporary.path) }
        if link(temporary.path, url.path) != 0 && errno != EEXIST {
            throw AuthError(.unauthorized, "cannot write \(url.path): \(String(cString: strerror(errno)))")
        }
        guard let data = FileManager.default.contents(atPath: url.path) else {
            throw AuthError(.unauthorized, "cannot read \(url.path)")
        }
        return data
    }
}
