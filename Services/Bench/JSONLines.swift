import Foundation

/// Reads a child process's JSON lines on a thread of its own: `line` gets each line's object as it
/// arrives, `end` runs once the output closes.
enum JSONLines {
    static func read(_ handle: FileHandle, line: @escaping @Sendable ([String: Any]) -> Void, end: @escaping @Sendable () -> Void = {}) {
        Thread {
            var buffer = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                buffer.append(chunk)
                while let newline = buffer.firstIndex(of: 0x0a) {
                    let text = buffer[buffer.startIndex..<newline]
                    buffer = Data(buffer[(newline + 1)...])
                    if let object = try? JSONSerialization.jsonObject(with: text) as? [String: Any] { line(object) }
                }
            }
            end()
        }.start()
    }
}
