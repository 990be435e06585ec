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
}
