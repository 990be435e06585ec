import CSystemdBus
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A failure on a D-Bus connection, or an error a peer answered with.
public struct DBusError: Error, Equatable, CustomStringConvertible, Sendable {
    /// The D-Bus error name, such as `org.freedesktop.DBus.Error.ServiceUnknown`; for a local
    /// failure, `local.<function>`.
    public let name: String
    public let message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    init(function: String, code: Int32) {
        self.init(name: "local.\(function)", message: String(cString: strerror(-code)))
    }

    public var description: String { "\(name): \(message)" }

    /// The peer is not on the bus and cannot be started.
    public var isNoPeer: Bool {
        name == "org.freedesktop.DBus.Error.ServiceUnknown" || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
    }

    /// The peer left the bus while the call waited for its answer (the bus says so with NoReply), or
    /// the bus itself went first, and sd-bus answered the call as it closed ("Connection terminated").
    public var isPeerGone: Bool {
        name == "org.freedesktop.DBus.Error.NoReply"
            && (message.contains("disconnected from message bus") || message.contains("Connection terminated"))
    }

    public var isTimeout: Bool {
        name == "org.freedesktop.DBus.Error.Timeout" || name == "org.freedesktop.DBus.Error.NoReply"
    }
}

/// A message received: a call's reply, or a signal, with its body read.
public struct DBusMessage: Sendable {
    /// The sender's unique name, such as `:1.42`.
    public let sender: String
    public let path: String
    public let interface: String
    public let member: String
    public let arguments: [DBusValue]
}

/// One connection to a message bus through libsystemd's sd-bus. Nothing on it blocks: calls take
/// their reply in a callback, with a timeout, and the owner drives the connection with `process()`
/// whenever `fileDescriptor` is readable and at least every few hundred milliseconds (for timeouts
/// and queued writes). Not thread-safe: use it from one thread, as the agent does from its loop.
public final class DBusConnection {
    private var bus: OpaquePointer?
    private var matches: [OpaquePointer] = []
    private var handlers: [MatchHandler] = []
    private var objects: [ObjectHandler] = []

    /// Connects to the bus at `address` (a D-Bus address, such as `unix:path=/run/user/1000/bus`)
    /// and says Hello; both complete as `process()` runs.
    public init(address: String) throws(DBusError) {
        var bus: OpaquePointer?
        try check("sd_bus_new", sd_bus_new(&bus))
        self.bus = bus
        try check("sd_bus_set_address", sd_bus_set_address(bus, address))
        try check("sd_bus_set_bus_client", sd_bus_set_bus_client(bus, 1))
        try check("sd_bus_start", sd_bus_start(bus))
    }

    deinit { close() }

    /// The session bus's address from the environment, never one that would start a bus: an
    /// `autolaunch:` address, or none at all with only a display, gives nil.
    public static func sessionAddress(environment: [String: String]) -> String? {
        if let address = environment["DBUS_SESSION_BUS_ADDRESS"], !address.isEmpty {
            return address.hasPrefix("autolaunch:") ? nil : address
        }
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            let path = runtime + "/bus"
            var status = stat()
            if stat(path, &status) == 0, status.st_mode & S_IFMT == S_IFSOCK { return "unix:path=" + path }
        }
        return nil
    }

    /// Readable when the connection has something to process.
    public var fileDescriptor: Int32 { bus.map { sd_bus_get_fd($0) } ?? -1 }

    public var isOpen: Bool { bus.map { sd_bus_is_open($0) > 0 } ?? false }

    /// Reads, writes and dispatches what is ready, running reply and signal callbacks; throws once
    /// the connection is closed (the bus went away).
    public func process() throws(DBusError) {
        guard bus != nil else { throw DBusError(name: "local.closed", message: "the connection is closed") }
        // The bus is read again each time round, and held for each step: a callback may close it.
        for _ in 0..<10_000 {
            guard let bus else { throw DBusError(name: "local.closed", message: "the connection was closed") }
            sd_bus_ref(bus)
            let result = sd_bus_process(bus, nil)
            sd_bus_unref(bus)
            if result < 0 { throw DBusError(function: "sd_bus_process", code: result) }
            if result == 0 { break }
        }
        guard let bus, sd_bus_is_open(bus) > 0 else {
            throw DBusError(name: "local.disconnected", message: "the bus closed the connection")
        }
    }

    /// Calls a method; `reply` gets its answer, the peer's error, or a timeout after `timeout`.
    /// `autoStart` false: a peer that is not on the bus is not started for the call.
    public func call(
        destination: String, path: String, interface: String, member: String, _ arguments: [DBusValue] = [],
        timeout: Duration = .seconds(25), autoStart: Bool = true, reply: @escaping (Result<DBusMessage, DBusError>) -> Void
    ) throws(DBusError) {
        guard let bus else { throw DBusError(name: "local.closed", message: "the connection is closed") }
        var message: OpaquePointer?
        try check("sd_bus_message_new_method_call", sd_bus_message_new_method_call(bus, &message, destination, path, interface, member))
        defer { sd_bus_message_unref(message) }
        if !autoStart { try check("sd_bus_message_set_auto_start", sd_bus_message_set_auto_start(message, 0)) }
        for argument in arguments { try Self.append(argument, to: message!) }
        let box = Unmanaged.passRetained(ReplyHandler(reply))
        let (seconds, attoseconds) = timeout.components
        let usec = UInt64(max(1, seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
        var slot: OpaquePointer?
        let result = sd_bus_call_async(bus, &slot, message, { message, userdata, _ in
            Unmanaged<ReplyHandler>.fromOpaque(userdata!).takeUnretainedValue().reply(DBusConnection.read(message!))
            return 1
        }, box.toOpaque(), usec)
        if result < 0 {
            box.release()
            throw DBusError(function: "sd_bus_call_async", code: result)
        }
        // The handler goes with the slot: after its reply, or with the bus when it is closed first.
        sd_bus_slot_set_destroy_callback(slot) { userdata in Unmanaged<ReplyHandler>.fromOpaque(userdata!).release() }
        sd_bus_slot_set_floating(slot, 1)
        sd_bus_slot_unref(slot)
    }

    /// Calls a method without waiting for an answer (for methods marked NoReply); the peer is
    /// started for it when it may be activated. Errors, even the peer's absence, are not reported.
    public func send(
        destination: String, path: String, interface: String, member: String, _ arguments: [DBusValue] = []
    ) throws(DBusError) {
        guard let bus else { throw DBusError(name: "local.closed", message: "the connection is closed") }
        var message: OpaquePointer?
        try check("sd_bus_message_new_method_call", sd_bus_message_new_method_call(bus, &message, destination, path, interface, member))
        defer { sd_bus_message_unref(message) }
        try check("sd_bus_message_set_expect_reply", sd_bus_message_set_expect_reply(message, 0))
        for argument in arguments { try Self.append(argument, to: message!) }
        try check("sd_bus_send", sd_bus_send(bus, message, nil))
    }

    /// Calls `handler` for each message that matches `rule` (a D-Bus match rule, such as
    /// `type='signal',interface='org.freedesktop.Notifications'`), for as long as the connection lives.
    public func addMatch(_ rule: String, _ handler: @escaping (DBusMessage) -> Void) throws(DBusError) {
        guard let bus else { throw DBusError(name: "local.closed", message: "the connection is closed") }
        let box = MatchHandler(handler)
        var slot: OpaquePointer?
        try check("sd_bus_add_match_async", sd_bus_add_match_async(bus, &slot, rule, { message, userdata, _ in
            let handler = Unmanaged<MatchHandler>.fromOpaque(userdata!).takeUnretainedValue()
            if case .success(let read) = DBusConnection.read(message!) { handler.handler(read) }
            return 0
        }, nil, Unmanaged.passUnretained(box).toOpaque()))
        handlers.append(box)
        if let slot { matches.append(slot) }
    }

    /// Serves the object at `path`: `handler` gets every method call to it and answers each once,
    /// at once or later, with `DBusCall.reply` or `fail`. A call it does not answer before the
    /// `DBusCall` is released is answered with `org.freedesktop.DBus.Error.UnknownMethod`.
    public func export(path: String, _ handler: @escaping (DBusCall) -> Void) throws(DBusError) {
        guard let bus else { throw DBusError(name: "local.closed", message: "the connection is closed") }
        let box = ObjectHandler { message in
            guard sd_bus_message_is_method_call(message, nil, nil) > 0 else { return 0 }
            guard case .success(let read) = DBusConnection.read(message) else {
                var error = sd_bus_error(name: nil, message: nil, _need_free: 0)
                _ = "org.freedesktop.DBus.Error.InvalidArgs".withCString { name in
                    "the arguments could not be read".withCString { text in
                        error.name = name
                        error.message = text
                        return sd_bus_reply_method_error(message, &error)
                    }
                }
                return 1
            }
            handler(DBusCall(message: message, read: read))
            return 1
        }
        var slot: OpaquePointer?
        try check("sd_bus_add_object", sd_bus_add_object(bus, &slot, path, { message, userdata, _ in
            Unmanaged<ObjectHandler>.fromOpaque(userdata!).takeUnretainedValue().handler(message!)
        }, Unmanaged.passUnretained(box).toOpaque()))
        objects.append(box)
        if let slot { matches.append(slot) }
    }

    /// Asks the bus for the well-known `name` (replacing no owner, queueing for none); `done`
    /// says whether this connection owns it now.
    public func requestName(_ name: String, done: @escaping (Result<Bool, DBusError>) -> Void) throws(DBusError) {
        try call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "RequestName", [.string(name), .uint32(4)], timeout: .seconds(10)
        ) { result in
            // 1: now the primary owner; 4: already it. 4 as the flag: do not queue.
            done(result.map { $0.arguments.first?.uint32 == 1 || $0.arguments.first?.uint32 == 4 })
        }
    }

    /// Closes the connection without waiting for anything: what was not yet written, and the
    /// replies still awaited, are dropped with it.
    public func close() {
        guard let bus else { return }
        for slot in matches { sd_bus_slot_unref(slot) }
        matches = []
        handlers = []
        objects = []
        sd_bus_close_unref(bus)
        self.bus = nil
    }

    // MARK: Marshalling

    private final class ReplyHandler {
        let reply: (Result<DBusMessage, DBusError>) -> Void
        init(_ reply: @escaping (Result<DBusMessage, DBusError>) -> Void) { self.reply = reply }
    }

    private final class MatchHandler {
        let handler: (DBusMessage) -> Void
        init(_ handler: @escaping (DBusMessage) -> Void) { self.handler = handler }
    }

    private final class ObjectHandler {
        let handler: (OpaquePointer) -> Int32
        init(_ handler: @escaping (OpaquePointer) -> Int32) { self.handler = handler }
    }

    private static func text(_ pointer: UnsafePointer<CChar>?) -> String { pointer.map { String(cString: $0) } ?? "" }

    /// The message's header and body, or the error it carries.
    static func read(_ message: OpaquePointer) -> Result<DBusMessage, DBusError> {
        if sd_bus_message_is_method_error(message, nil) > 0, let error = sd_bus_message_get_error(message) {
            return .failure(DBusError(name: text(error.pointee.name), message: text(error.pointee.message)))
        }
        do {
            let arguments = try readAll(message)
            return .success(DBusMessage(
                sender: text(sd_bus_message_get_sender(message)), path: text(sd_bus_message_get_path(message)),
                interface: text(sd_bus_message_get_interface(message)), member: text(sd_bus_message_get_member(message)),
                arguments: arguments))
        } catch {
            return .failure(error)
        }
    }

    /// Reads values up to the end of the current container (or of the body).
    private static func readAll(_ message: OpaquePointer) throws(DBusError) -> [DBusValue] {
        var values: [DBusValue] = []
        while true {
            var type: CChar = 0
            var contents: UnsafePointer<CChar>?
            let peeked = sd_bus_message_peek_type(message, &type, &contents)
            if peeked < 0 { throw DBusError(function: "sd_bus_message_peek_type", code: peeked) }
            if peeked == 0 { return values }
            values.append(try readOne(message, type: type, contents: contents))
        }
    }

    private static func readOne(_ message: OpaquePointer, type: CChar, contents: UnsafePointer<CChar>?) throws(DBusError) -> DBusValue {
        func basic<T: BitwiseCopyable>(_ initial: T) throws(DBusError) -> T {
            var value = initial
            let result = withUnsafeMutablePointer(to: &value) { sd_bus_message_read_basic(message, type, $0) }
            try check("sd_bus_message_read_basic", result)
            return value
        }
        func inside() throws(DBusError) -> [DBusValue] {
            try check("sd_bus_message_enter_container", sd_bus_message_enter_container(message, type, contents))
            let values = try readAll(message)
            try check("sd_bus_message_exit_container", sd_bus_message_exit_container(message))
            return values
        }
        switch UInt8(bitPattern: type) {
        case UInt8(ascii: "y"): return .byte(try basic(UInt8(0)))
        case UInt8(ascii: "b"): return .boolean(try basic(Int32(0)) != 0)
        case UInt8(ascii: "n"): return .int16(try basic(Int16(0)))
        case UInt8(ascii: "q"): return .uint16(try basic(UInt16(0)))
        case UInt8(ascii: "i"), UInt8(ascii: "h"): return .int32(try basic(Int32(0)))
        case UInt8(ascii: "u"): return .uint32(try basic(UInt32(0)))
        case UInt8(ascii: "x"): return .int64(try basic(Int64(0)))
        case UInt8(ascii: "t"): return .uint64(try basic(UInt64(0)))
        case UInt8(ascii: "d"): return .double(try basic(Double(0)))
        case UInt8(ascii: "s"): return .string(text(try basic(UnsafePointer<CChar>?.none)))
        case UInt8(ascii: "o"): return .objectPath(text(try basic(UnsafePointer<CChar>?.none)))
        case UInt8(ascii: "g"): return .signature(text(try basic(UnsafePointer<CChar>?.none)))
        case UInt8(ascii: "a") where text(contents) == "y":
            var pointer: UnsafeRawPointer?
            var size = 0
            try check("sd_bus_message_read_array", sd_bus_message_read_array(message, CChar(UInt8(ascii: "y")), &pointer, &size))
            guard let pointer, size > 0 else { return .bytes([]) }
            return .bytes(Array(UnsafeRawBufferPointer(start: pointer, count: size)))
        case UInt8(ascii: "a"): return .array(element: text(contents), try inside())
        case UInt8(ascii: "e"):
            let pair = try inside()
            guard pair.count == 2 else { throw DBusError(name: "local.read", message: "a dictionary entry of \(pair.count) values") }
            return .entry(pair[0], pair[1])
        case UInt8(ascii: "v"):
            guard let inner = try inside().first else { throw DBusError(name: "local.read", message: "an empty variant") }
            return .variant(inner)
        case UInt8(ascii: "r"): return .structure(try inside())
        default: throw DBusError(name: "local.read", message: "type '\(Character(UnicodeScalar(UInt8(bitPattern: type))))' is not read")
        }
    }

    static func append(_ value: DBusValue, to message: OpaquePointer) throws(DBusError) {
        func basic<T: BitwiseCopyable>(_ type: Character, _ value: T) throws(DBusError) {
            let result = withUnsafePointer(to: value) { sd_bus_message_append_basic(message, CChar(type.asciiValue!), $0) }
            try check("sd_bus_message_append_basic", result)
        }
        func text(_ type: Character, _ value: String) throws(DBusError) {
            let result = value.withCString { sd_bus_message_append_basic(message, CChar(type.asciiValue!), $0) }
            try check("sd_bus_message_append_basic", result)
        }
        func container(_ type: Character, _ contents: String, _ values: [DBusValue]) throws(DBusError) {
            try check("sd_bus_message_open_container", sd_bus_message_open_container(message, CChar(type.asciiValue!), contents))
            for value in values { try append(value, to: message) }
            try check("sd_bus_message_close_container", sd_bus_message_close_container(message))
        }
        switch value {
        case .byte(let value): try basic("y", value)
        case .boolean(let value): try basic("b", Int32(value ? 1 : 0))
        case .int16(let value): try basic("n", value)
        case .uint16(let value): try basic("q", value)
        case .int32(let value): try basic("i", value)
        case .uint32(let value): try basic("u", value)
        case .int64(let value): try basic("x", value)
        case .uint64(let value): try basic("t", value)
        case .double(let value): try basic("d", value)
        case .string(let value): try text("s", value)
        case .objectPath(let value): try text("o", value)
        case .signature(let value): try text("g", value)
        case .bytes(let value):
            let result = value.withUnsafeBytes { sd_bus_message_append_array(message, CChar(UInt8(ascii: "y")), $0.baseAddress, $0.count) }
            try check("sd_bus_message_append_array", result)
        case .array(let element, let values): try container("a", element, values)
        case .entry(let key, let value): try container("e", key.signature + value.signature, [key, value])
        case .variant(let inner): try container("v", inner.signature, [inner])
        case .structure(let fields): try container("r", fields.map(\.signature).joined(), fields)
        }
    }
}

@inline(__always)
private func check(_ function: String, _ result: Int32) throws(DBusError) {
    if result < 0 { throw DBusError(function: function, code: result) }
}

/// A method call to an exported object, answered once with `reply` or `fail`.
public final class DBusCall {
    public let message: DBusMessage
    private var call: OpaquePointer?

    init(message: OpaquePointer, read: DBusMessage) {
        self.message = read
        call = sd_bus_message_ref(message)
    }

    deinit {
        // Best effort for a caller no handler answered; the bus times the call out otherwise.
        if call != nil { try? fail(name: "org.freedesktop.DBus.Error.UnknownMethod", message: "\(message.interface).\(message.member) is not served here") }
    }

    /// The interface and member, such as `org.unifiedpush.Distributor2.Register`.
    public var method: String { "\(message.interface).\(message.member)" }

    public func reply(_ values: [DBusValue] = []) throws(DBusError) {
        guard let call else { return }
        self.call = nil
        defer { sd_bus_message_unref(call) }
        // A caller that asked for no reply (NoReply) gets none.
        guard sd_bus_message_get_expect_reply(call) > 0 else { return }
        var reply: OpaquePointer?
        try check("sd_bus_message_new_method_return", sd_bus_message_new_method_return(call, &reply))
        defer { sd_bus_message_unref(reply) }
        for value in values { try DBusConnection.append(value, to: reply!) }
        try check("sd_bus_send", sd_bus_send(nil, reply, nil))
    }

    /// Answers with the D-Bus error `name`, such as `org.freedesktop.DBus.Error.InvalidArgs`.
    public func fail(name: String, message text: String) throws(DBusError) {
        guard let call else { return }
        self.call = nil
        defer { sd_bus_message_unref(call) }
        guard sd_bus_message_get_expect_reply(call) > 0 else { return }
        let result = name.withCString { name in
            text.withCString { text in
                var error = sd_bus_error(name: name, message: text, _need_free: 0)
                return sd_bus_reply_method_error(call, &error)
            }
        }
        try check("sd_bus_reply_method_error", result)
    }
}
