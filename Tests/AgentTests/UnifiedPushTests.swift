import DBus
import Foundation
import HubProtocol
import Storage
import Testing

@testable import NHAgent

/// The agent as a UnifiedPush distributor, without a bus: the calls read and checked, what it
/// answers and sends, the channel's decision for a push message, and the store that keeps messages
/// for apps until they have them.
@Suite("UnifiedPush distributor")
struct UnifiedPushTests {
    static let vapid = "BDd3_hVL9fZi9Ybo2UUzA284WG5FZR30_95YeZJsiApwXKpNcF1rRPF3foIiBHXRdJI2Qhumhf6_LFTeZaNndIo"

    static func parse(_ interface: String, _ member: String, _ arguments: [DBusValue]) -> UnifiedPushRequest {
        UnifiedPushRequest.parse(interface: interface, member: member, arguments: arguments)
    }

    @Test("Register and Unregister of Distributor2 (a{sv}) and Distributor1 are read, with their connector's version")
    func reads() {
        let v2 = Self.parse(UnifiedPushRequest.distributor2, "Register", [.stringVariants([
            ("service", .string("org.example.Chat")), ("token", .string("t-1")), ("description", .string("alice")),
            ("vapid", .string(Self.vapid)), ("unknown", .uint32(1)),
        ])])
        #expect(v2 == .register(UnifiedPushRegistration(service: "org.example.Chat", token: "t-1", description: "alice", vapid: Self.vapid, connector: 2)))
        let v1 = Self.parse(UnifiedPushRequest.distributor1, "Register", [.string("org.example.Chat"), .string("t-1"), .string("")])
        #expect(v1 == .register(UnifiedPushRegistration(service: "org.example.Chat", token: "t-1", description: nil, vapid: nil, connector: 1)))
        #expect(Self.parse(UnifiedPushRequest.distributor2, "Unregister", [.stringVariants([("token", .string("t-1"))])])
            == .unregister(token: "t-1", connector: 2))
        #expect(Self.parse(UnifiedPushRequest.distributor1, "Unregister", [.string("t-1")]) == .unregister(token: "t-1", connector: 1))
        #expect(Self.parse("org.freedesktop.DBus.Introspectable", "Introspect", []) == .introspect)
        #expect(Self.parse(UnifiedPushRequest.distributor2, "Other", []) == .unknown)
    }

    @Test("arguments that do not follow the spec are refused with what is wrong")
    func refusals() {
        func refused(_ fields: [(String, DBusValue)]) -> Bool {
            if case .invalidRegistration = Self.parse(UnifiedPushRequest.distributor2, "Register", [.stringVariants(fields)]) { return true }
            return false
        }
        #expect(refused([("token", .string("t"))]))
        #expect(refused([("service", .string("nodots")), ("token", .string("t"))]))
        #expect(refused([("service", .string("org.1example.App")), ("token", .string("t"))]))
        #expect(refused([("service", .string("org.example.App")), ("token", .string(""))]))
        #expect(refused([("service", .string("org.example.App")), ("token", .string(String(repeating: "t", count: 101)))]))
        #expect(refused([("service", .string("org.example.App")), ("token", .string("t")), ("description", .string(String(repeating: "d", count: 101)))]))
        #expect(refused([("service", .string("org.example.App")), ("token", .string("t")), ("vapid", .string("not-a-key"))]))
        #expect(refused([("service", .string("org.example.App")), ("token", .string("t")), ("vapid", .string("A" + Self.vapid.dropFirst()))]))
        if case .invalidRegistration = Self.parse(UnifiedPushRequest.distributor1, "Register", [.string("org.example.App")]) {} else {
            Issue.record("Distributor1 Register with one argument")
        }
    }

    @Test("answers and connector calls carry what each interface version expects")
    func writes() {
        #expect(UnifiedPushRequest.registerReply(failure: nil, connector: 2) == [.stringVariants([("success", .string("REGISTRATION_SUCCEEDED"))])])
        #expect(UnifiedPushRequest.registerReply(failure: "NETWORK", connector: 2)
            == [.stringVariants([("success", .string("REGISTRATION_FAILED")), ("reason", .string("NETWORK"))])])
        #expect(UnifiedPushRequest.registerReply(failure: nil, connector: 1) == [.string("NEW_ENDPOINT"), .string("")])
        #expect(UnifiedPushRequest.registerReply(failure: "INTERNAL_ERROR", connector: 1, detail: "token must be 1 to 100 bytes")
            == [.string("REGISTRATION_FAILED"), .string("token must be 1 to 100 bytes")])
        #expect(UnifiedPushRequest.registerReply(failure: "INTERNAL_ERROR", connector: 2, detail: "why")
            == [.stringVariants([("success", .string("REGISTRATION_FAILED")), ("reason", .string("INTERNAL_ERROR")), ("message", .string("why"))])])
        let (interface, arguments) = UnifiedPushRequest.message(token: "t", bytes: Data([1, 2]), id: "d1", connector: 2)
        #expect(interface == "org.unifiedpush.Connector2")
        #expect(arguments.first?["message"]?.bytes == [1, 2] && arguments.first?["token"]?.string == "t" && arguments.first?["id"]?.string == "d1")
        #expect(UnifiedPushRequest.message(token: "t", bytes: Data([1]), id: "d1", connector: 1).1 == [.string("t"), .bytes([1]), .string("d1")])
        #expect(UnifiedPushRequest.newEndpoint(token: "t", endpoint: "https://e", connector: 1).1 == [.string("t"), .string("https://e")])
    }

    @Test("a delivery carrying a push message goes to its app, never to a popup; seen before, it is only acknowledged")
    func channel() {
        var core = AgentCore()
        let message = AppPushMessage(endpoint: "e1", message: Data([9, 8]), urgency: .low, topic: "t")
        #expect(AppPushMessage.from(payload: message.payload) == message)
        #expect(AppPushMessage.from(payload: #"{"title":"hi"}"#) == nil)
        let delivery = AgentDelivery(deliveryId: "d1", notificationId: "n1", installationId: "me", payload: message.payload,
                                     expiresAt: AgentCoreTests.t0.addingTimeInterval(60))
        #expect(core.on(.received(.deliver(delivery), seen: false), now: AgentCoreTests.t0) == [.handToApp(delivery, message)])
        #expect(core.on(.received(.deliver(delivery), seen: true), now: AgentCoreTests.t0) == [.acknowledge("d1")])
    }

    /// A fresh agent store, as the agent opens it.
    static func appStore() throws -> (SQLiteDatabase, AppStore) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("nh-apps-\(UUID().uuidString).db").path
        let database = try SQLiteDatabase(path: path)
        try database.migrate(AgentSchema.migrations)
        return (database, AppStore(database: database))
    }

    @Test("the store keeps messages in order until handed; holding takes those not in a call, once; a handed one is seen")
    func store() throws {
        let (database, store) = try UnifiedPushTests.appStore()
        let app = RegisteredApp(token: "t", service: "org.example.App", description: nil, vapid: Self.vapid, connector: 2, secret: "s3cret")
        try store.save(app, now: AgentCoreTests.t0)
        #expect(try store.endpoints() == [app.endpointId: PushEndpoint(vapid: Self.vapid)])
        let later = AgentCoreTests.t0.addingTimeInterval(60)
        for id in ["d1", "d2", "d3"] {
            #expect(try store.keep(AppMessage(deliveryId: id, notificationId: "n", endpointId: app.endpointId, message: Data(id.utf8), expiresAt: later, held: false)))
        }
        #expect(try !store.keep(AppMessage(deliveryId: "d1", notificationId: "n", endpointId: app.endpointId, message: Data(), expiresAt: later, held: false)))
        #expect(try store.messages(endpointId: app.endpointId, now: AgentCoreTests.t0, limit: 10).map(\.deliveryId) == ["d1", "d2", "d3"])
        #expect(try store.hold(endpointId: app.endpointId, except: ["d2"]) == ["d1", "d3"])
        #expect(try store.hold(endpointId: app.endpointId, except: []) == ["d2"])
        #expect(try store.hold(endpointId: app.endpointId, except: []) == [])
        let first = try #require(try store.message(deliveryId: "d1"))
        try store.handed(first, now: AgentCoreTests.t0)
        #expect(try AgentStore(database: database).isSeen("d1"))
        #expect(try store.waiting(endpointId: app.endpointId) == 2)
        _ = try store.purge(now: later)
        #expect(try store.waiting(endpointId: app.endpointId) == 0)
        try store.remove(token: "t")
        #expect(try store.apps().isEmpty && store.app(endpointId: app.endpointId) == nil)
    }

    @Test("endpoint URLs are the gateway's address, up/, and the app's secret alone: nothing names the device")
    func endpointBase() {
        #expect(AgentDaemon.endpointBase(namespace: "https://hub.example.org") == "https://hub.example.org/up/")
        #expect(AgentDaemon.endpointBase(namespace: "http://127.0.0.1:7780/") == "http://127.0.0.1:7780/up/")
    }
}

@Suite("Power supply and urgency")
struct PowerSupplyTests {
    func supplies(_ folders: [String: [String: String]]) throws -> URL {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("nh-power-\(UUID().uuidString)")
        for (name, files) in folders {
            let folder = root.appendingPathComponent(name)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for (file, value) in files { try (value + "\n").write(to: folder.appendingPathComponent(file), atomically: true, encoding: .utf8) }
        }
        return root
    }

    @Test("mains or no battery: everything; on battery: low and up; at 15% or less: only high")
    func urgency() throws {
        #expect(PowerState.read(root: URL(fileURLWithPath: "/nonexistent")).minimumUrgency == .veryLow)
        #expect(PowerState.read(root: try supplies(["AC": ["type": "Mains", "online": "1"]])).minimumUrgency == .veryLow)
        let battery = ["type": "Battery", "status": "Discharging", "capacity": "40"]
        #expect(PowerState.read(root: try supplies(["AC": ["type": "Mains", "online": "0"], "BAT0": battery])).minimumUrgency == .low)
        #expect(PowerState.read(root: try supplies(["AC": ["type": "Mains", "online": "1"], "BAT0": battery])).minimumUrgency == .veryLow)
        var low = battery
        low["capacity"] = "15"
        #expect(PowerState.read(root: try supplies(["BAT0": low])) == PowerState(onMains: false, batteryPercent: 15))
        #expect(PowerState.read(root: try supplies(["BAT0": low])).minimumUrgency == .high)
        // A wireless mouse's battery says nothing about the device's power.
        #expect(PowerState.read(root: try supplies(["hid-mouse": ["type": "Battery", "scope": "Device", "status": "Discharging", "capacity": "5"]]))
            .minimumUrgency == .veryLow)
    }

    @Test("the store hands over what is urgent enough and holds the rest, in order")
    func storeByUrgency() throws {
        let (_, store) = try UnifiedPushTests.appStore()
        let later = AgentCoreTests.t0.addingTimeInterval(60)
        for (id, urgency) in [("d1", PushUrgency.veryLow), ("d2", .high), ("d3", .low), ("d4", .normal)] {
            _ = try store.keep(AppMessage(deliveryId: id, notificationId: "n", endpointId: "e", message: Data(), expiresAt: later, held: false, urgency: urgency))
        }
        #expect(try store.messages(endpointId: "e", now: AgentCoreTests.t0, limit: 9, urgency: .normal).map(\.deliveryId) == ["d2", "d4"])
        #expect(try store.hold(endpointId: "e", except: [], below: .normal) == ["d1", "d3"])
        #expect(try store.messages(endpointId: "e", now: AgentCoreTests.t0, limit: 9).map(\.deliveryId) == ["d1", "d2", "d3", "d4"])
        #expect(try store.message(deliveryId: "d3")?.urgency == .low)
    }
}

@Suite("Agent store identity")
struct AgentStoreIdentityTests {
    @Test("a command never makes the device key; the daemon and a command opening one store agree on the key and the id")
    func oneIdentity() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("nh-agent-\(UUID().uuidString).db").path
        let command = AgentStore(database: try SQLiteDatabase(path: path))
        try command.database.migrate(AgentSchema.migrations)
        let daemon = AgentStore(database: try SQLiteDatabase(path: path))
        try daemon.database.migrate(AgentSchema.migrations)
        #expect(try command.existingChannelKeys() == nil)
        let keys = try daemon.channelKeys()
        #expect(try command.existingChannelKeys()?.publicKey == keys.publicKey)
        #expect(try command.channelKeys().secretKey == keys.secretKey)
        #expect(try command.installationId() == daemon.installationId())
        // A stored value that cannot be read is an error that says so, never "no categories".
        try daemon.set("categories", "World,Sports")
        #expect(throws: StorageError.self) { try command.categories }
        try daemon.setCategories(["World"])
        #expect(try command.categories == ["World"])
    }
}

@Suite("Agent control requests")
struct AgentControlTests {
    static func control(
        signedIn: Bool = true, register: @escaping ([String]) throws -> Void = { _ in }, later: @escaping () -> Void = {}
    ) throws -> (AgentControl, AgentStore) {
        let (database, _) = try UnifiedPushTests.appStore()
        let store = AgentStore(database: database)
        let control = AgentControl(
            store: store, tagLimit: 3, act: signedIn ? { _, _ in } : nil, register: register, registerLater: later, apps: { [] },
            removeApp: { throw HubError(.notFound, "no app '\($0)'") })
        return (control, store)
    }

    func code(_ body: () throws -> Any) -> ErrorCode? {
        do {
            _ = try body()
            return nil
        } catch {
            return (error as? HubError)?.code ?? .internal
        }
    }

    @Test("categories are kept once the registry took them; refused, the old ones stay; unanswered, they wait for it")
    func categories() throws {
        let (taken, store) = try Self.control()
        _ = try taken.categoriesChanged(AgentCategoriesChanged(categories: ["World"]))
        #expect(try store.categories == ["World"])
        #expect(code { try taken.categoriesChanged(AgentCategoriesChanged(categories: ["a b"])) } == .invalidTag)
        #expect(code { try taken.categoriesChanged(AgentCategoriesChanged(categories: ["a", "b", "c", "d"])) } == .invalidTag)

        let (refused, refusedStore) = try Self.control(register: { _ in throw HubError(.forbidden, "bound to another key") })
        try refusedStore.setCategories(["World"])
        #expect(code { try refused.categoriesChanged(AgentCategoriesChanged(categories: ["Sports"])) } == .forbidden)
        #expect(try refusedStore.categories == ["World"])

        var later = 0
        let (waiting, waitingStore) = try Self.control(register: { _ in throw HubError(.timeout, "no reply") }, later: { later += 1 })
        #expect(code { try waiting.categoriesChanged(AgentCategoriesChanged(categories: ["Sports"])) } == .unavailable)
        #expect(try waitingStore.categories == ["Sports"] && later == 1)
    }

    @Test("a user action needs a signed-in agent; an unknown app is not_found")
    func refusals() throws {
        #expect(code { try Self.control(signedIn: false).0.userAction(AgentUserAction(id: "n", action: .read)) } == .invalidArgument)
        #expect(code { try Self.control().0.userAction(AgentUserAction(id: "n", action: .read)) } == nil)
        #expect(code { try Self.control().0.removeApp("org.example.Nobody") } == .notFound)
    }
}
