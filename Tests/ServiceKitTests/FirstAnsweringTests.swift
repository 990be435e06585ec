import Foundation
import HubProtocol
import ServiceKit
import Testing

@Suite("First answering")
struct FirstAnsweringTests {
    /// A service that answers health with its name, or fails with the error it is given.
    final class Stand: ServiceCalling {
        let name: String
        var failure: HubError?
        var calls = 0
        init(_ name: String, failure: HubError? = nil) {
            self.name = name
            self.failure = failure
        }
        func call<R: HubRequest>(_ request: R, auth: String?) throws -> R.Reply {
            calls += 1
            if let failure { throw failure }
            return HealthReply(service: name, status: "ok", version: "1", pid: 1, uptimeSeconds: 0, endpoints: [:]) as! R.Reply
        }
    }

    @Test("the first that answers answers; one that did not is asked after the one that did")
    func failover() throws {
        let down = Stand("a", failure: HubError(.timeout, "no reply from a"))
        let up = Stand("b")
        let services = FirstAnswering([down, up])
        #expect(try services.call(HealthRequest(), auth: nil).service == "b")
        #expect(try services.call(HealthRequest(), auth: nil).service == "b")
        #expect(down.calls == 1 && up.calls == 2)
        // When the one that answered goes down, the other is asked again.
        up.failure = HubError(.unavailable, "gone")
        down.failure = nil
        #expect(try services.call(HealthRequest(), auth: nil).service == "a")
    }

    @Test("any other error is the answer; no answer from any is the last timeout")
    func errors() throws {
        let refusing = Stand("a", failure: HubError(.notFound, "no such notification"))
        let other = Stand("b")
        #expect(throws: HubError(.notFound, "no such notification")) { try FirstAnswering([refusing, other]).call(HealthRequest(), auth: nil) }
        #expect(other.calls == 0)
        let first = Stand("a", failure: HubError(.timeout, "no reply from a"))
        let second = Stand("b", failure: HubError(.timeout, "no reply from b"))
        #expect(throws: HubError(.timeout, "no reply from b")) { try FirstAnswering([first, second]).call(HealthRequest(), auth: nil) }
    }
}
