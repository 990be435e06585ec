import Foundation
import HubProtocol
import Testing

/// Hub names by Notification Hubs' rules, and the keys that keep one hub's things from another's.
@Suite("Hub names and scopes")
struct HubNameTests {
    @Test("names of letters, digits, '.', '-' and '_', 1 to 260 long, starting and ending with a letter or digit, are taken",
        arguments: ["a", "news", "News-2", "app.ios_prod", "9", String(repeating: "x", count: 260)])
    func goodNames(name: String) throws {
        try HubName.check(name)
    }

    @Test("any other name is refused, saying why", arguments: [
        ("", "1 to 260"), (String(repeating: "x", count: 261), "1 to 260"), ("-news", "start and end"), ("news.", "start and end"),
        ("a/b", "'/'"), ("a b", "' '"), ("naïve", "non-ASCII"), ("Web", "gateway's own"), ("metrics", "gateway's own"), ("a$b", "'$'"),
    ])
    func badNames(name: String, says: String) {
        #expect {
            try HubName.check(name)
        } throws: { error in
            guard let error = error as? HubError else { return false }
            return error.code == .invalidArgument && error.message.contains(says)
        }
    }

    @Test("the default hub keeps ids bare; another hub's keys are its name in lower case, a '/', then the id")
    func keys() {
        let home = HubScope(hub: nil, defaultHub: "hub")
        #expect(home.isDefault && home.key("inst-1") == "inst-1" && home.envelopeHub == nil)
        #expect(HubScope(hub: "HUB", defaultHub: "hub") == home)
        let news = HubScope(hub: "News", defaultHub: "hub")
        #expect(!news.isDefault && news.key("inst-1") == "news/inst-1" && news.envelopeHub == "news")
        #expect(news.id("news/inst-1") == "inst-1" && news.owns("news/inst-1") && !news.owns("inst-1") && !news.owns("newsy/inst-1"))
        #expect(home.owns("inst-1") && !home.owns("news/inst-1"))
        #expect(HubScope.of(key: "news/inst-1") == news && HubScope.of(key: "inst-1") == home)
        #expect(HubScope(named: "news") == news && HubScope(named: nil) == home)
        let installation = Installation(installationId: "inst-1", pushChannel: "k")
        #expect(installation.keyed(in: news).installationId == "news/inst-1" && installation.keyed(in: news).local(in: news) == installation)
    }

    @Test("an envelope names its hub, omitted for the default hub, and reads back; a hub that is not a string is refused")
    func envelopeHub() throws {
        let named = HubCodec.encode(HealthRequest(), id: "1", auth: "t", hub: "news")
        #expect(String(decoding: named, as: UTF8.self) == #"{"auth":"t","hub":"news","id":"1","payload":{},"type":"health","v":1}"#)
        #expect(try HubCodec.decode(HealthRequest.self, from: named).hub == "news")
        #expect(HubCodec.scanHeader(named)?.header.hub == "news")
        let bare = HubCodec.encode(HealthRequest(), id: "1")
        #expect(!String(decoding: bare, as: UTF8.self).contains("hub"))
        #expect(try HubCodec.decode(HealthRequest.self, from: bare).hub == nil)
        let wrong = Data(#"{"hub":3,"id":"1","payload":{},"type":"health","v":1}"#.utf8)
        #expect(throws: HubError.self) { try HubCodec.decode(HealthRequest.self, from: wrong) }
        #expect((try? HubCodec.parse(wrong)) == nil)
    }
}
