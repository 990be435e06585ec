import Foundation
import HubProtocol
import Testing

@testable import NHAgent

/// The agent's standard-output lines, which scripts and hooks read: their fields and their shape.
@Suite("Agent output lines")
struct AgentLineTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    static func text(_ line: some Encodable) -> String { String(decoding: HubCodec.encodeValue(line), as: UTF8.self) }

    @Test("a delivery's line carries its payload as JSON, with the ids and times")
    func notification() {
        let delivery = AgentDelivery(
            deliveryId: "d1", notificationId: "n1", installationId: "me", template: "news",
            payload: #"{"message":"Hi","count":12345678901234567}"#, expiresAt: Self.t0.addingTimeInterval(60))
        let payload = JSONValue.parse(delivery.payload)!
        let line = AgentLine.Notification(delivery, payload: payload, receivedAt: Self.t0, richPath: nil)
        #expect(Self.text(line) == #"{"deliveryId":"d1","event":"notification","expiresAt":"2027-01-15T08:01:00.000Z","installationId":"me","notificationId":"n1","#
            + #""payload":{"count":12345678901234567,"message":"Hi"},"receivedAt":"2027-01-15T08:00:00.000Z","template":"news"}"#)
    }

    @Test("a payload that is not JSON is given as a string; a rich reference names where it was written")
    func plainAndRich() throws {
        let rich = RichReference(richId: "ab12", richType: "image", message: "A picture", contentType: "image/png", size: 1_024)
        let delivery = AgentDelivery(
            deliveryId: "d2", notificationId: "n2", installationId: "me", payload: "just words", expiresAt: Self.t0, rich: rich, richTicket: "t")
        let line = AgentLine.Notification(delivery, payload: .string(delivery.payload), receivedAt: Self.t0, richPath: "/home/a/rich/ab12")
        let parsed = try #require(JSONValue.parse(Self.text(line)))
        #expect(parsed["payload"] == "just words")
        #expect(parsed["template"] == nil)
        #expect(parsed["rich"] == [
            "richId": "ab12", "richType": "image", "message": "A picture", "contentType": "image/png", "size": 1_024, "path": "/home/a/rich/ab12",
        ])
        let unwritten = AgentLine.Notification(delivery, payload: .string(delivery.payload), receivedAt: Self.t0, richPath: nil)
        #expect(JSONValue.parse(Self.text(unwritten))?["rich"]?["path"] == nil)
    }

    @Test("an agent event's own fields sit beside event and at, which they cannot replace")
    func event() {
        let line = AgentLine.Event(event: "token-requested", fields: ["user": "alice", "event": "spoofed", "at": "never"], at: Self.t0)
        #expect(Self.text(line) == #"{"at":"2027-01-15T08:00:00.000Z","event":"token-requested","user":"alice"}"#)
    }

    @Test("a user event carries the notification as the sync store gives it")
    func userEvent() throws {
        let notification = UserNotification(
            id: "u1", appNotificationId: "a1", userId: "alice", visual: VisualContent(title: "T", body: "B"),
            expiresAt: Self.t0.addingTimeInterval(3_600), readState: .read, createdAt: Self.t0, modifiedAt: Self.t0)
        let line = AgentLine.UserEvent(event: "updated", id: "u1", notification: notification, at: Self.t0)
        let parsed = try #require(JSONValue.parse(Self.text(line)))
        #expect(parsed["event"] == "updated")
        #expect(parsed["id"] == "u1")
        let expected = JSONValue.parse(HubCodec.encodePayload(UserNotificationReply(notification: notification)))?["notification"]
        #expect(parsed["notification"] == expected)
        #expect(parsed["notification"]?["readState"] == "read")
    }
}
