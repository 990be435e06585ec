import DBus
import Foundation
import Testing

/// The D-Bus connection against a real, private dbus-daemon started by each test.
@Suite("D-Bus connection", .serialized)
struct DBusConnectionTests {
    /// A private session bus in a folder of its own, ended with the test.
    final class PrivateBus {
        let folder: URL
        let process = Process()
        let address: String

        init() throws {
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("nh-dbus-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let socket = folder.appendingPathComponent("bus").path
            let config = folder.appendingPathComponent("bus.conf")
            try """
                <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
                 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
                <busconfig>
                  <type>session</type>
                  <listen>unix:path=\(socket)</listen>
                  <auth>EXTERNAL</auth>
                  <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
                </busconfig>
                """.write(to: config, atomically: true, encoding: .utf8)
            process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
            process.arguments = ["--config-file=\(config.path)", "--nofork", "--nopidfile"]
            try process.run()
            address = "unix:path=\(socket)"
            for _ in 0..<400 where !FileManager.default.fileExists(atPath: socket) { usleep(25_000) }
        }

        func stop() {
            // SIGKILL: the daemon inherits the test process's signal mask, which may hold SIGTERM back.
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
            try? FileManager.default.removeItem(at: folder)
        }

        deinit { stop() }
    }

    /// Processes `connection` until `done` or about ten seconds.
    static func pump(_ connections: DBusConnection..., until done: () -> Bool) throws {
        for _ in 0..<1_000 where !done() {
            for connection in connections { try connection.process() }
            usleep(10_000)
        }
    }

    static func callBus(
        _ connection: DBusConnection, _ member: String, _ arguments: [DBusValue] = [], timeout: Duration = .seconds(5)
    ) throws -> Result<DBusMessage, DBusError> {
        var result: Result<DBusMessage, DBusError>?
        try connection.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: member,
            arguments, timeout: timeout
        ) { result = $0 }
        try pump(connection) { result != nil }
        return try #require(result)
    }

    @Test("calls read strings, arrays, dictionaries and variants, and errors carry the bus's names")
    func calls() throws {
        let bus = try PrivateBus()
        defer { bus.stop() }
        let connection = try DBusConnection(address: bus.address)
        defer { connection.close() }
        let names = try Self.callBus(connection, "ListNames").get()
        #expect(names.arguments.first?.strings?.contains("org.freedesktop.DBus") == true)
        #expect(names.sender == "org.freedesktop.DBus")
        let owner = try Self.callBus(connection, "GetNameOwner", [.string("org.freedesktop.DBus")]).get()
        #expect(owner.arguments == [.string("org.freedesktop.DBus")])
        // a{sv} with a uint32 in a variant: this process's id.
        let unique = try #require(try Self.callBus(connection, "ListNames").get().arguments.first?.strings?.first { $0.hasPrefix(":") })
        let credentials = try Self.callBus(connection, "GetConnectionCredentials", [.string(unique)]).get()
        guard case .array(let element, let entries)? = credentials.arguments.first else {
            Issue.record("not an array: \(credentials.arguments)")
            return
        }
        #expect(element == "{sv}")
        let pids = entries.compactMap { entry -> UInt32? in
            guard case .entry(.string("ProcessID"), let value) = entry else { return nil }
            return value.uint32
        }
        #expect(pids == [UInt32(getpid())])
        switch try Self.callBus(connection, "GetNameOwner", [.string("org.example.Nobody")]) {
        case .success(let message): Issue.record("an owner for nobody: \(message)")
        case .failure(let error):
            #expect(error.name == "org.freedesktop.DBus.Error.NameHasNoOwner")
            #expect(error.isNoPeer)
        }
        // A wrong signature is refused by the bus, not by a crash.
        if case .success = try Self.callBus(connection, "GetNameOwner", [.uint32(7)]) { Issue.record("a uint32 name was accepted") }
    }

    @Test("a match rule delivers the signals it names, with their arguments")
    func signals() throws {
        let bus = try PrivateBus()
        defer { bus.stop() }
        let watcher = try DBusConnection(address: bus.address)
        defer { watcher.close() }
        var owners: [[DBusValue]] = []
        try watcher.addMatch(
            "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.example.Watched'"
        ) { owners.append($0.arguments) }
        _ = try Self.callBus(watcher, "ListNames").get()  // the match is in place once this answers
        let owner = try DBusConnection(address: bus.address)
        let granted = try Self.callBus(owner, "RequestName", [.string("org.example.Watched"), .uint32(0)]).get()
        #expect(granted.arguments == [.uint32(1)])
        _ = try Self.callBus(owner, "RequestName", [.string("org.example.Other"), .uint32(0)]).get()
        try Self.pump(watcher) { owners.count == 1 }
        #expect(owners.count == 1)
        #expect(owners.first?.first == .string("org.example.Watched"))
        #expect(owners.first?.last?.string?.hasPrefix(":") == true)
        owner.close()
        try Self.pump(watcher) { owners.count == 2 }
        #expect(owners.last?.last == .string(""), "the name is released when its owner goes")
    }

    @Test("a peer that never answers times out; only the calling connection waits for it")
    func timeout() throws {
        let bus = try PrivateBus()
        defer { bus.stop() }
        let caller = try DBusConnection(address: bus.address)
        defer { caller.close() }
        let silent = try DBusConnection(address: bus.address)
        defer { silent.close() }
        _ = try Self.callBus(silent, "RequestName", [.string("org.example.Silent"), .uint32(0)]).get()
        var result: Result<DBusMessage, DBusError>?
        try caller.call(
            destination: "org.example.Silent", path: "/", interface: "org.example.Silent", member: "Hang", timeout: .milliseconds(300)
        ) { result = $0 }
        try Self.pump(caller) { result != nil }
        guard case .failure(let error)? = result else {
            Issue.record("no timeout: \(String(describing: result))")
            return
        }
        #expect(error.isTimeout, "\(error)")
        #expect(!error.isPeerGone)
        // The peer leaves while a call waits: the bus answers for it, and says so.
        var gone: Result<DBusMessage, DBusError>?
        try caller.call(
            destination: "org.example.Silent", path: "/", interface: "org.example.Silent", member: "Hang", timeout: .seconds(10)
        ) { gone = $0 }
        // A few rounds for the call to go out; the silent peer never reads it (it would refuse it).
        for _ in 0..<5 {
            try caller.process()
            usleep(10_000)
        }
        silent.close()
        try Self.pump(caller) { gone != nil }
        guard case .failure(let left)? = gone else {
            Issue.record("no answer when the peer left: \(String(describing: gone))")
            return
        }
        #expect(left.isPeerGone, "\(left)")
        // The bus going first: sd-bus answers the calls still waiting as it closes.
        #expect(DBusError(name: "org.freedesktop.DBus.Error.NoReply", message: "Connection terminated").isPeerGone)
    }


    @Test("an exported object answers calls: every type round trips, errors carry their names, an unanswered call is refused")
    func serve() throws {
        let bus = try PrivateBus()
        defer { bus.stop() }
        let server = try DBusConnection(address: bus.address)
        defer { server.close() }
        var kept: DBusCall?
        try server.export(path: "/org/example/Echo") { call in
            switch call.message.member {
            case "Echo": try? call.reply(call.message.arguments)
            case "Refuse": try? call.fail(name: "org.example.Error.Refused", message: "no, thank you")
            case "Later": kept = call
            default: break  // released unanswered
            }
        }
        var owned: Result<Bool, DBusError>?
        try server.requestName("org.example.Echo") { owned = $0 }
        try Self.pump(server) { owned != nil }
        #expect(try owned?.get() == true)
        var again: Result<Bool, DBusError>?
        let rival = try DBusConnection(address: bus.address)
        defer { rival.close() }
        try rival.requestName("org.example.Echo") { again = $0 }
        try Self.pump(rival, server) { again != nil }
        #expect(try again?.get() == false, "a name already owned is not taken")

        let client = try DBusConnection(address: bus.address)
        defer { client.close() }
        func call(_ member: String, _ arguments: [DBusValue] = []) throws -> Result<DBusMessage, DBusError> {
            var result: Result<DBusMessage, DBusError>?
            try client.call(destination: "org.example.Echo", path: "/org/example/Echo", interface: "org.example.Echo", member: member,
                            arguments, timeout: .seconds(5)) { result = $0 }
            try Self.pump(client, server) { result != nil }
            return try #require(result)
        }
        let values: [DBusValue] = [
            .byte(7), .boolean(true), .int16(-3), .uint16(3), .int32(-70_000), .uint32(70_000), .int64(-1 << 40), .uint64(1 << 50),
            .double(2.5), .string("héllo"), .objectPath("/a/b"), .signature("a{sv}"), .bytes([0, 1, 255, 128]), .bytes([]),
            .stringVariants([("token", .string("t")), ("message", .bytes(Array(repeating: 9, count: 4096)))]),
            .array(element: "s", []), .structure([.string("x"), .uint32(1)]), .variant(.array(element: "i", [.int32(1), .int32(2)])),
        ]
        let echoed = try call("Echo", values).get()
        #expect(echoed.arguments == values)
        #expect(echoed.arguments[14]["message"]?.bytes?.count == 4096)
        #expect(echoed.arguments[14]["token"]?.string == "t")
        switch try call("Refuse") {
        case .success: Issue.record("a refused call succeeded")
        case .failure(let error): #expect(error == DBusError(name: "org.example.Error.Refused", message: "no, thank you"))
        }
        if case .failure(let error) = try call("Nothing") {
            #expect(error.name == "org.freedesktop.DBus.Error.UnknownMethod")
        } else {
            Issue.record("an unanswered call succeeded")
        }
        // Answered later, from outside the handler.
        var result: Result<DBusMessage, DBusError>?
        try client.call(destination: "org.example.Echo", path: "/org/example/Echo", interface: "org.example.Echo", member: "Later",
                        [.string("x")], timeout: .seconds(5)) { result = $0 }
        try Self.pump(client, server) { kept != nil }
        try kept?.reply([.string("done")])
        kept = nil
        try Self.pump(client, server) { result != nil }
        #expect(try result?.get().arguments == [.string("done")])
    }

    @Test("a bus that goes away ends the connection with an error, not a hang")
    func busGone() throws {
        let bus = try PrivateBus()
        let connection = try DBusConnection(address: bus.address)
        defer { connection.close() }
        _ = try Self.callBus(connection, "ListNames").get()
        bus.stop()
        #expect(throws: DBusError.self) { try Self.pump(connection) { false } }
        #expect(!connection.isOpen)
        #expect(throws: DBusError.self) { try DBusConnection(address: bus.address) }
    }

    @Test("the session bus comes from the environment and is never started")
    func sessionAddress() throws {
        #expect(DBusConnection.sessionAddress(environment: ["DBUS_SESSION_BUS_ADDRESS": "unix:path=/x"]) == "unix:path=/x")
        #expect(DBusConnection.sessionAddress(environment: ["DBUS_SESSION_BUS_ADDRESS": "autolaunch:"]) == nil)
        #expect(DBusConnection.sessionAddress(environment: ["DISPLAY": ":0"]) == nil)
        let bus = try PrivateBus()
        defer { bus.stop() }
        #expect(DBusConnection.sessionAddress(environment: ["XDG_RUNTIME_DIR": bus.folder.path]) == bus.address)
        #expect(DBusConnection.sessionAddress(environment: ["XDG_RUNTIME_DIR": "/nonexistent"]) == nil)
    }
}
