import Foundation
import HubProtocol

/// The cost of the wire format alone: one user post encoded, then decoded strictly, as a service does.
enum CodecBench {
    static func userPost(_ count: Int) throws -> BenchResult {
        let post = PostUserNotification(
            userId: "alice", appNotificationId: "order-42", visual: VisualContent(title: "Order shipped", body: "Arrives Friday"),
            priority: "normal", expiresAt: Date().addingTimeInterval(3600))
        let start = ContinuousClock.now
        for index in 0..<count {
            let data = HubCodec.encode(post, id: "c-\(index)", auth: "SharedAccessSignature sr=x&sig=y&se=1&skn=z")
            _ = try HubCodec.decode(PostUserNotification.self, from: data)
        }
        return BenchResult(
            name: "HubCodec user.post encode + strict decode", unit: "op/s", count: count, seconds: seconds(since: start))
    }

    static let jsonDeliveryName = "agent delivery as JSON envelope, encode + decode"

    /// One delivery and its acknowledgement as the agent channel carries them: the JSON envelope
    /// beside the compact frames, per delivery of 256 bytes.
    static func agentDelivery(_ count: Int) throws -> [BenchResult] {
        let delivery = AgentDelivery(
            deliveryId: "5d1e0b7c-3f4a-4c55-9a7e-0f6b3f0d2a11/linux-9efc3cbf-813a-4e17-b0ac-46a84ac18be2/default",
            notificationId: "5d1e0b7c-3f4a-4c55-9a7e-0f6b3f0d2a11", installationId: "linux-9efc3cbf-813a-4e17-b0ac-46a84ac18be2",
            template: "default", payload: #"{"m":""# + String(repeating: "x", count: 240) + #""}"#, expiresAt: Date().addingTimeInterval(3600))
        var start = ContinuousClock.now
        for index in 0..<count {
            let data = HubCodec.encode(delivery, id: "d-\(index)")
            _ = try HubCodec.decode(AgentDelivery.self, from: data)
            let ack = HubCodec.encode(AgentAck(deliveryIds: [delivery.deliveryId]), id: "a-\(index)")
            _ = try HubCodec.decode(AgentAck.self, from: ack)
        }
        let json = BenchResult(name: jsonDeliveryName, unit: "op/s", count: count, seconds: seconds(since: start), note: "with its ack")
        start = ContinuousClock.now
        for _ in 0..<count {
            _ = try AgentWire.decode(AgentWire.encodeDelivery(delivery), installationId: delivery.installationId)
            _ = try AgentWire.decode(AgentWire.encode(.ack(AgentAck(deliveryIds: [delivery.deliveryId]))))
        }
        let frames = BenchResult(
            name: "agent delivery as compact frames, encode + decode", unit: "op/s", count: count, seconds: seconds(since: start),
            baseline: jsonDeliveryName, note: "with its ack; the format the agent channel uses")
        return [json, frames]
    }
}
