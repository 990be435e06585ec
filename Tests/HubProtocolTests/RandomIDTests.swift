import Foundation
import HubProtocol
import Testing

@Suite("Random ids")
struct RandomIDTests {
    @Test("a random id is a lowercase version 4 UUID, and a thousand are all different")
    func versionFourLowercase() throws {
        var seen = Set<String>()
        for _ in 0..<1_000 {
            let id = RandomID.uuid()
            let uuid = try #require(UUID(uuidString: id), "\(id)")
            #expect(id == uuid.uuidString.lowercased())
            let bytes = uuid.uuid
            #expect(bytes.6 >> 4 == 4, "\(id): version")
            #expect(bytes.8 >> 6 == 0b10, "\(id): variant")
            seen.insert(id)
        }
        #expect(seen.count == 1_000)
    }
}
