import Foundation
import Testing

@testable import NHBench

/// The parts of nh-bench postgres that need no server: the rows of the raw inserts.
@Suite("PostgreSQL bench")
struct PostgresBenchTests {
    @Test("a raw row is what the publish service stores for the same send, column by column")
    func row() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let values = try PostgresBench.row(6, encoder: JSONEncoder(), now: now, timeToLive: 3_600)
        #expect(values.count == 7)
        #expect(values[0] as? Int64 == 7)
        #expect(UUID(uuidString: try #require(values[1] as? String)) != nil)
        #expect(values[2] == nil)
        let send = try #require(values[3] as? Data)
        let object = try #require(try JSONSerialization.jsonObject(with: send) as? [String: Any])
        #expect(object["tagExpression"] as? String == "World")
        #expect((object["properties"] as? [String: String])?["messageParam"] == "Breaking World News 6")
        #expect(values[4] as? String == "Enqueued")
        #expect(values[5] as? Double == 1_800_000_000)
        #expect(values[6] as? Double == 1_800_003_600)
    }

    @Test("the body size the header names is that of an encoded send")
    func bodySize() {
        #expect(PostgresBench.bodySize > 60 && PostgresBench.bodySize < 200)
    }
}
