import DispatchCore
import Foundation
import Push
import ServiceKit

/// The dispatcher's health details: the core's state and totals, the pull, the push services'.
enum DispatchHealth {
    struct Inputs {
        var registrySequence: UInt64?
        var cursor: UInt64?
        var sendsBlocked = 0
        var handshakes: (accepted: Int, refused: Int) = (0, 0)
        var pushPending = 0
        var pushInFlight = 0
        /// How often push services' connections were shut down as stuck (PushHTTPClient.stalls).
        var pushStalls = 0
        var pushCounters: [PushService: PushCounters] = [:]
        /// Notifications planned as they came whole on the publish service's stream, and as pulled.
        var planned: (streamed: Int, pulled: Int) = (0, 0)
    }

    static func details(_ core: Dispatcher, _ inputs: Inputs) -> [String: String] {
        let counters = core.counters
        var details: [String: String] = [
            "installations": String(core.index.count),
            "registrySequence": inputs.registrySequence.map(String.init) ?? "none",
            "cursor": String(inputs.cursor ?? 0),
            "agents": String(core.sessionCount),
            "inFlight": String(core.inFlightCount),
            "backlogInstallations": String(core.backlogCount),
            // Broadcasts stored once for agents away, not expired, and the deliveries they parked.
            "parkedBroadcasts": String(core.parked.count),
            "parkedTotal": String(counters.parked),
            "sentTotal": String(counters.sent),
            "resentTotal": String(counters.resent),
            "ackedTotal": String(counters.acknowledged),
            "unknownAcksTotal": String(counters.unknownAcks),
            "refusedTotal": String(counters.refused),
            "signalsTotal": String(counters.signals),
            "sessionsStartedTotal": String(counters.connected),
            "sendsBlockedTotal": String(inputs.sendsBlocked),
            "zapAcceptedTotal": String(inputs.handshakes.accepted),
            "zapRefusedTotal": String(inputs.handshakes.refused),
            "pushPending": String(inputs.pushPending),
            "pushInFlight": String(inputs.pushInFlight),
            "pushStalls": String(inputs.pushStalls),
            "streamedTotal": String(inputs.planned.streamed),
            "pulledTotal": String(inputs.planned.pulled),
        ]
        if let shards = core.shards {
            details["shards"] = String(shards.owned.count)
            details["redirectedTotal"] = String(counters.redirected)
        }
        for reason in DispatchNote.DropReason.allCases {
            details["sessionsEnded\(reason.rawValue.capitalized)Total"] = String(counters.dropped[reason] ?? 0)
        }
        for (service, counters) in inputs.pushCounters {
            let name = "push" + service.platform.rawValue.capitalized
            details[name + "SentTotal"] = String(counters.sent)
            details[name + "DeliveredTotal"] = String(counters.delivered)
            details[name + "RetriedTotal"] = String(counters.retried)
            details[name + "ExpiredChannelsTotal"] = String(counters.expiredChannels)
            details[name + "FailedTotal"] = String(counters.failed)
            details[name + "TokenRequestsTotal"] = String(counters.tokenRequests)
            // By the service's own error code, such as Unregistered or 503.
            for (code, count) in counters.errors {
                let word = code.filter { $0.isASCII && ($0.isLetter || $0.isNumber) }
                if !word.isEmpty { details[name + "Error" + word.prefix(1).uppercased() + word.dropFirst().lowercased() + "Total"] = String(count) }
            }
            // What the service said beside the status, such as WNS's "X-WNS-Status: received":
            // pushWnsAnswerStatusReceivedTotal, pushWnsAnswerDeviceconnectionstatusConnectedTotal.
            for (said, count) in counters.answers {
                let words = said.replacingOccurrences(of: "X-WNS-", with: "").split(whereSeparator: { !$0.isASCII || !($0.isLetter || $0.isNumber) })
                let word = words.map { $0.prefix(1).uppercased() + $0.dropFirst().lowercased() }.joined()
                if !word.isEmpty { details[name + "Answer" + word + "Total"] = String(count) }
            }
        }
        return details
    }
}
