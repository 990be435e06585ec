import Foundation
import HubProtocol
import ServiceKit
import Storage
import Synchronization
import Testing

@testable import NHAgent

/// Rows the agent keeps that this build can no longer read: left in place they would wait at the
/// head of a queue, or in the store, for good. They go, each with a log line saying what.
@Suite("Agent rows that no longer read")
struct UnreadableRowsTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    final class Lines: Sendable {
        private let lines = Mutex<[String]>([])
        func append(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    let lines = Lines()
    let store: AgentStore
    let logger: Logger
    let client: HubClient

    init() throws {
        store = try AgentStore.open(home: FileManager.default.temporaryDirectory.appendingPathComponent("nh-agent-rows-\(UUID().uuidString)"))
        logger = Logger(service: "nh-agent", level: .info, sink: { [lines] in lines.append($0) })
        // Never reached: nothing here calls the hub.
        client = try HubClient(connect: "inproc://nowhere-\(UUID().uuidString)")
    }

    func fetcher() throws -> RichFetcher {
        try RichFetcher(
            store: store, home: URL(fileURLWithPath: store.database.path).deletingLastPathComponent(), client: client,
            output: AgentOutput(hook: nil, logger: logger), logger: logger, maxAttempts: 3)
    }

    func keep(_ id: String, _ bytes: Data, nextAt: Double) throws {
        try store.database.run("INSERT INTO rich_pending (delivery_id, delivery, next_at) VALUES (?, ?, ?)", [id, bytes, nextAt])
    }

    func delivery(_ id: String, expiresAt: Date) throws -> Data {
        try HubCodec.makeEncoder().encode(AgentDelivery(deliveryId: id, notificationId: "n-\(id)", installationId: "i", payload: "{}", expiresAt: expiresAt))
    }

    var keptIds: [String] {
        get throws { try store.database.query("SELECT delivery_id FROM rich_pending ORDER BY delivery_id").map { try $0.string("delivery_id", of: "rich_pending") } }
    }

    @Test("a kept rich delivery that does not decode is dropped by the purge and by the fetch round, with a log line each")
    func undecodableRichDelivery() throws {
        let fetcher = try fetcher()
        try keep("given-up-garbled", Data("not json".utf8), nextAt: RichFetcher.givenUp)
        try keep("given-up-expired", try delivery("given-up-expired", expiresAt: Self.now.addingTimeInterval(-1)), nextAt: RichFetcher.givenUp)
        try keep("given-up-live", try delivery("given-up-live", expiresAt: Self.now.addingTimeInterval(60)), nextAt: RichFetcher.givenUp)
        try fetcher.purge(now: Self.now)
        #expect(try keptIds == ["given-up-live"])

        try keep("due-garbled", Data([0xff, 0x00]), nextAt: Self.now.timeIntervalSince1970)
        let round = try fetcher.processDue(now: Self.now)
        #expect(round.shown.isEmpty && round.failed.isEmpty)
        #expect(try keptIds == ["given-up-live"])
        let dropped = lines.all.filter { $0.contains("does not decode; dropped") }
        #expect(dropped.count == 2)
        #expect(dropped.contains { $0.contains("given-up-garbled") } && dropped.contains { $0.contains("due-garbled") })
    }

    @Test("a queued popup action this agent does not know is dropped with a log line, not left at the head of the queue")
    func unknownPopupAction() throws {
        let cache = UserCache(database: store.database)
        try store.database.run("INSERT INTO pending_actions (id, action, at) VALUES (?, ?, ?)", ["n-1", "teleport", Self.now.timeIntervalSince1970])
        let sync = AgentUserSync(cache: cache, credential: "c", device: "d", logger: logger, output: AgentOutput(hook: nil, logger: logger), client: client)
        #expect(try sync.pendingActions == 1)
        sync.sendActions(now: Self.now)
        #expect(try sync.pendingActions == 0)
        #expect(lines.all.contains { $0.contains("not one this agent knows") && $0.contains("teleport") })
    }
}
