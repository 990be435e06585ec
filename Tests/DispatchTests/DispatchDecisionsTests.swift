import Bus
import DispatchCore
import Foundation
import HubProtocol
import Push
import Testing

@testable import NHDispatch

/// The dispatcher shell's decisions, in plain types: pulling, resuming push deliveries, reading
/// the agent channel, and health.
@Suite("Dispatcher decisions")
struct DispatchDecisionsTests {
    @Test("one pull at a time, from the cursor, once the registry is read; the page shrinks for large fan-outs and grows back")
    func pulls() {
        var pulls = PullControl()
        #expect(pulls.next(after: 5, registryReady: false) == nil)
        #expect(pulls.next(after: nil, registryReady: true) == nil)
        #expect(pulls.next(after: 5, registryReady: true) == PendingNotificationsRequest(after: 5, limit: 100))
        #expect(pulls.next(after: 5, registryReady: true) == nil, "one in flight")
        // 10 notifications of 5,000 deliveries each: 2 a page from now on, and pull again at once.
        let again = pulls.answered(count: 10, planned: 50_000)
        #expect(again)
        #expect(pulls.next(after: 15, registryReady: true)?.limit == 2)
        let more = pulls.answered(count: 0, planned: 0)
        #expect(!more, "nothing more")
        // Held back while the agents have the limit in flight, and resumed once they have fewer.
        #expect(pulls.next(after: 15, registryReady: true, inFlight: PullControl.inFlightLimit) == nil && pulls.heldBack)
        #expect(!pulls.resumes(inFlight: PullControl.inFlightLimit) && pulls.resumes(inFlight: PullControl.inFlightLimit - 1))
        #expect(pulls.next(after: 15, registryReady: true, inFlight: 10)?.limit == 2 && !pulls.heldBack)
        #expect(!pulls.resumes(inFlight: 0))
        _ = pulls.answered(count: 2, planned: 10)
        #expect(pulls.limit == 100)
        _ = pulls.next(after: 17, registryReady: true)
        pulls.failed()
        #expect(pulls.next(after: 17, registryReady: true) != nil, "a failure frees the next pull")
        #expect(PullControl.hinted(latest: 18, cursor: 17) && !PullControl.hinted(latest: 17, cursor: 17) && !PullControl.hinted(latest: 9, cursor: nil))
    }

    @Test("what the stream brings while a pull is on its way is kept, up to a bound, and given back once; nothing is kept without a pull")
    func keptWhilePulling() {
        func messages(_ range: ClosedRange<UInt64>) -> [SequencedMessage] {
            range.map { SequencedMessage(topic: NotificationStream.topic, sequence: $0, body: Data("n\($0)".utf8)) }
        }
        var pulls = PullControl()
        #expect(!pulls.keep(messages(1...3)) && pulls.kept.isEmpty, "no pull on its way: planned at once")
        _ = pulls.next(after: 0, registryReady: true)
        #expect(pulls.keep(messages(1...3)) && pulls.keep(messages(4...5)))
        _ = pulls.answered(count: 1, planned: 1)
        #expect(pulls.takeKept().map(\.sequence) == [1, 2, 3, 4, 5])
        #expect(pulls.takeKept().isEmpty, "given back once")
        _ = pulls.next(after: 5, registryReady: true)
        let limit = UInt64(PullControl.heldStreamLimit)
        #expect(pulls.keep(messages(1...(limit - 1))) && pulls.keep(messages(limit...(limit + 10))))
        pulls.failed()
        let kept = pulls.takeKept()
        #expect(kept.count == PullControl.heldStreamLimit && kept.last?.sequence == limit, "past the bound, the next pull takes the rest")
    }

    @Test("notifications carried whole on the stream are planned from the cursor on, up to a gap or one carried by id; none while a pull is on its way")
    func streamed() throws {
        func accepted(_ sequence: UInt64, _ message: String = "m") -> AcceptedNotification {
            AcceptedNotification(
                sequence: sequence, notificationId: "n\(sequence)", send: SendNotification(format: .template, properties: ["m": message]),
                enqueuedAt: Date(timeIntervalSince1970: 1_000), expiresAt: Date(timeIntervalSince1970: 2_000))
        }
        func message(_ notification: AcceptedNotification) -> SequencedMessage {
            SequencedMessage(topic: NotificationStream.topic, sequence: notification.sequence, body: NotificationStream.body(notification))
        }
        let heartbeat = SequencedMessage(topic: SequencedMessage.heartbeatTopic, sequence: 9, body: Data())
        // 4 and 5 were planned already; 6, 7 follow; 9 comes after a gap.
        let messages = [message(accepted(5)), heartbeat, message(accepted(6)), message(accepted(7)), message(accepted(9))]
        #expect(PullControl.streamed(messages, after: 5) == [accepted(6), accepted(7)])
        #expect(PullControl.streamed(messages, after: 7).isEmpty, "9 is not next: 8 is pulled, and 9 with it")
        #expect(PullControl.streamed(messages, after: 3).isEmpty, "4 is missing")
        #expect(PullControl.streamed(messages, after: 5, limit: 1) == [accepted(6)], "at most a page; 7 is pulled")
        // Too large to carry: its id only, so it and what follows it are pulled.
        let large = accepted(8, String(repeating: "x", count: NotificationStream.inlineLimit))
        #expect(NotificationStream.body(large) == Data("n8".utf8))
        #expect(PullControl.streamed([message(accepted(7)), message(large), message(accepted(9))], after: 6) == [accepted(7)])
        // A body that names another sequence, or does not read, is pulled too.
        let wrong = SequencedMessage(topic: NotificationStream.topic, sequence: 8, body: NotificationStream.body(accepted(3)))
        let garbled = SequencedMessage(topic: NotificationStream.topic, sequence: 8, body: Data("{not json".utf8))
        #expect(PullControl.streamed([wrong], after: 7).isEmpty && PullControl.streamed([garbled], after: 7).isEmpty)

        var pulls = PullControl()
        #expect(pulls.takesStreamed(registryReady: true, inFlight: 0))
        #expect(!pulls.takesStreamed(registryReady: false, inFlight: 0), "the registry is not read yet")
        #expect(!pulls.takesStreamed(registryReady: true, inFlight: PullControl.inFlightLimit), "the pull that follows is held back")
        _ = pulls.next(after: 5, registryReady: true)
        #expect(!pulls.takesStreamed(registryReady: true, inFlight: 0), "the pull on its way brings them")
        _ = pulls.answered(count: 0, planned: 0)
        #expect(pulls.takesStreamed(registryReady: true, inFlight: 0))
        // Broadcasts of 5,000 deliveries each: the stream's pages shrink as a pull's do.
        pulls.adapt(count: 2, planned: 10_000)
        #expect(pulls.limit == 2)
    }

    @Test("push deliveries resume a page at a time, each once most of the last is done, until a page is not full")
    func resume() {
        var resume = PushResume()
        #expect(resume.limit(pushPending: 0) == PushResume.page)
        resume.read(PushResume.page)
        #expect(resume.limit(pushPending: PushResume.page / 2) == nil)
        #expect(resume.limit(pushPending: PushResume.page / 2 - 1) == PushResume.page)
        resume.read(12)
        #expect(resume.limit(pushPending: 0) == nil)
    }

    @Test("the agent channel: hello, ack and bye for the core; old envelopes, extra frames and wrong messages refused with their code")
    func inbox() throws {
        let inbox = AgentInbox(messagesPerSecond: 1)
        let route = Data("r".utf8)
        func code(_ input: AgentInbox.Input?) -> ErrorCode? {
            guard case .refuse(let frames)? = input else { return nil }
            if frames.count == 2 { return (try? HubCodec.decode(ErrorReply.self, from: frames[1]).payload.code) ?? .internal }
            guard case .error(let error)? = try? AgentWire.decode(frames[0]) else { return nil }
            return error.code
        }
        guard case .event(.hello(let helloRoute, let key, let id, let registered))? = inbox.read([route, AgentWire.encode(.hello(AgentHello(installationId: "i1")))], peer: "K", now: 0)
        else {
            Issue.record("hello")
            return
        }
        #expect(helloRoute == route && key == "K" && id == "i1" && registered == nil)
        // With the version its registration stored.
        guard case .event(.hello(_, _, _, let version))? = inbox.read(
            [Data("another".utf8), AgentWire.encode(.hello(AgentHello(installationId: "i1", registered: 42)))], peer: "K2", now: 0)
        else {
            Issue.record("hello with its version")
            return
        }
        #expect(version == 42)
        // The rate (1 a second, bursts of 2) counts hellos, never acknowledgements.
        let ack = AgentWire.encode(.ack(AgentAck(deliveryIds: ["d1"])))
        for _ in 0..<5 {
            guard case .event(.ack(_, let read))? = inbox.read([route, ack], peer: "K", now: 0) else { Issue.record("ack"); return }
            #expect(read.deliveryIds == ["d1"])
        }
        #expect(code(inbox.read([route, AgentWire.encode(.hello(AgentHello(installationId: "i1")))], peer: "K", now: 0)) == nil)
        #expect(code(inbox.read([route, AgentWire.encode(.hello(AgentHello(installationId: "i1")))], peer: "K", now: 0)) == .rateLimited)
        guard case .event(.bye(let byeRoute, let byeId))? = inbox.read([route, AgentWire.encode(.bye(AgentBye(installationId: "i1")))], peer: "P", now: 0)
        else {
            Issue.record("bye")
            return
        }
        #expect(byeRoute == route && byeId == "i1")
        #expect(code(inbox.read([route, Data(), Data("{}".utf8)], peer: "L", now: 0)) == .unsupportedVersion)
        #expect(code(inbox.read([route, Data("hello".utf8), Data("x".utf8)], peer: "M", now: 0)) == .malformedFrames)
        #expect(code(inbox.read([route, AgentWire.encode(.welcome(AgentWelcome(installationId: "i", pending: 0)))], peer: "N", now: 0)) == .unknownType)
        #expect(inbox.read([route], peer: "O", now: 0) == nil)
    }

    @Test("health names the core's state and totals, the cursor and the push services' counts")
    func health() {
        var core = Dispatcher()
        _ = core.on(.snapshot(RegistrySnapshot(sequence: 1, installations: [Installation(installationId: "i", pushChannel: "k", tags: ["World"])])), now: Date())
        // A broadcast while its agent is away is parked.
        _ = core.on(.accepted([AcceptedNotification(
            sequence: 1, notificationId: "n1", send: SendNotification(format: .native, body: "{}", tagExpression: "World"),
            enqueuedAt: Date(), expiresAt: Date().addingTimeInterval(60))]), now: Date())
        var counters = PushCounters()
        counters.sent = 3
        counters.errors = ["BadDeviceToken": 2]
        let details = DispatchHealth.details(core, DispatchHealth.Inputs(
            registrySequence: 9, cursor: 4, sendsBlocked: 1, handshakes: (5, 6), pushPending: 7, pushInFlight: 8,
            pushCounters: [PushService.apple: counters], planned: (streamed: 10, pulled: 11)))
        #expect(details["streamedTotal"] == "10" && details["pulledTotal"] == "11")
        #expect(details["installations"] == "1" && details["registrySequence"] == "9" && details["cursor"] == "4")
        #expect(details["zapAcceptedTotal"] == "5" && details["zapRefusedTotal"] == "6" && details["sendsBlockedTotal"] == "1")
        #expect(details["pushPending"] == "7" && details["pushInFlight"] == "8")
        #expect(details["pushApnsSentTotal"] == "3" && details["pushApnsErrorBaddevicetokenTotal"] == "2")
        #expect(details["sessionsEndedSilentTotal"] == "0" && details["shards"] == nil)
        #expect(details["parkedBroadcasts"] == "1" && details["parkedTotal"] == "1")
        #expect(DispatchHealth.details(core, DispatchHealth.Inputs())["registrySequence"] == "none")
    }
}

@Suite("Expired push channels")
struct ChannelExpiryTests {
    @Test("an expired channel removes its installation, on the version that had it; a new channel or another answer keeps it")
    func deletion() {
        var index = InstallationIndex()
        var installation = Installation(installationId: "p1", platform: "apns", pushChannel: "old")
        installation.version = 4
        index.replace(with: RegistrySnapshot(sequence: 1, installations: [installation]))
        let message = PushMessage(
            deliveryId: "d", notificationId: "n", installationId: "p1", platform: .apns, pushChannel: "old", payload: "{}", headers: [:],
            expiresAt: Date().addingTimeInterval(60))
        #expect(ChannelExpiry.deletion(for: message, .channelExpired(reason: "Unregistered"), index: index)
            == InstallationDelete(installationId: "p1", ifMatch: "4"))
        #expect(ChannelExpiry.deletion(for: message, .delivered, index: index) == nil)
        var moved = message
        moved.pushChannel = "older"
        #expect(ChannelExpiry.deletion(for: moved, .channelExpired(reason: "Unregistered"), index: index) == nil)
        moved.installationId = "gone"
        #expect(ChannelExpiry.deletion(for: moved, .channelExpired(reason: "Unregistered"), index: index) == nil)
    }
}
