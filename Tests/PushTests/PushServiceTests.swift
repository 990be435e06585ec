import HubProtocol
import Push
import Testing

@Suite struct PushServiceTests {
    @Test func eachServiceNamesItsPlatform() {
        for service in PushService.allCases {
            #expect(PushService(platform: service.platform) == service)
        }
        #expect(PushService(platform: .linux) == nil)
        #expect(PushService(platform: .gcm) == nil, "GCM is gone: its installations are FCM v1 now")
    }
}
