import Auth
import DBus
import Foundation

/// The UnifiedPush D-Bus distributor API (UnifiedPush's DBUS spec), as plain values: a call to
/// `org.unifiedpush.Distributor2` (or the older `Distributor1`) read and checked, and the answers
/// and connector calls written. No bus here.
enum UnifiedPushRequest: Equatable {
    case register(UnifiedPushRegistration)
    case unregister(token: String, connector: Int)
    case introspect
    /// An Unregister whose arguments do not follow the spec, with what is wrong.
    case invalid(String, connector: Int)
    /// A Register whose arguments do not follow the spec, with what is wrong: answered as the spec
    /// answers a registration that failed, which connectors handle.
    case invalidRegistration(String, connector: Int)
    case unknown

    static let distributor2 = "org.unifiedpush.Distributor2"
    static let distributor1 = "org.unifiedpush.Distributor1"
    static let connector2 = "org.unifiedpush.Connector2"
    static let connector1 = "org.unifiedpush.Connector1"
    static let connectorPath = "/org/unifiedpush/Connector"
    static let distributorPath = "/org/unifiedpush/Distributor"

    static func parse(interface: String, member: String, arguments: [DBusValue]) -> UnifiedPushRequest {
        switch (interface, member) {
        case (distributor2, "Register"):
            guard arguments.count == 1, let args = arguments.first else { return .invalidRegistration("Register takes one a{sv}", connector: 2) }
            return check(
                service: args["service"]?.string, token: args["token"]?.string, description: args["description"]?.string,
                vapid: args["vapid"]?.string, connector: 2)
        case (distributor2, "Unregister"):
            guard let token = arguments.first?["token"]?.string, validToken(token) else {
                return .invalid("Unregister needs its token: 1 to 100 bytes", connector: 2)
            }
            return .unregister(token: token, connector: 2)
        case (distributor1, "Register"):
            guard arguments.count == 3 else { return .invalidRegistration("Register takes serviceName, token, description", connector: 1) }
            return check(
                service: arguments[0].string, token: arguments[1].string, description: arguments[2].string, vapid: nil, connector: 1)
        case (distributor1, "Unregister"):
            guard let token = arguments.first?.string, validToken(token) else {
                return .invalid("Unregister needs its token: 1 to 100 bytes", connector: 1)
            }
            return .unregister(token: token, connector: 1)
        case ("org.freedesktop.DBus.Introspectable", "Introspect"):
            return .introspect
        default:
            return .unknown
        }
    }

    private static func check(service: String?, token: String?, description: String?, vapid: String?, connector: Int) -> UnifiedPushRequest {
        guard let service, validServiceName(service) else {
            return .invalidRegistration("service must be the app's D-Bus service name, such as org.example.App", connector: connector)
        }
        guard let token, validToken(token) else { return .invalidRegistration("token must be 1 to 100 bytes", connector: connector) }
        if let description, description.utf8.count > 100 { return .invalidRegistration("description is at most 100 bytes", connector: connector) }
        if let vapid, !validVAPID(vapid) {
            return .invalidRegistration("vapid must be an uncompressed P-256 public key in base64url (87 characters)", connector: connector)
        }
        return .register(UnifiedPushRegistration(
            service: service, token: token, description: description?.isEmpty == true ? nil : description,
            vapid: vapid?.isEmpty == true ? nil : vapid, connector: connector))
    }

    static func validToken(_ token: String) -> Bool { !token.isEmpty && token.utf8.count <= 100 }

    /// A well-known bus name: two or more elements of A–Z a–z 0–9 _ -, none starting with a digit.
    static func validServiceName(_ name: String) -> Bool {
        let elements = name.split(separator: ".", omittingEmptySubsequences: false)
        guard name.utf8.count <= 255, elements.count >= 2 else { return false }
        return elements.allSatisfy { element in
            guard let first = element.utf8.first, !(0x30...0x39).contains(first) else { return false }
            return element.utf8.allSatisfy { ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F || $0 == 0x2D }
        }
    }

    static func validVAPID(_ key: String) -> Bool {
        guard key.utf8.count == 87, let point = Data(base64URL: key) else { return false }
        return point.count == 65 && point.first == 0x04
    }

    // MARK: Answers and connector calls

    /// Register's answer: success, or failure with one of the spec's reasons; `detail` says what
    /// to fix (Distributor1's free-text reason, and Distributor2's `message` beside its reason).
    static func registerReply(failure: String?, connector: Int, detail: String? = nil) -> [DBusValue] {
        if connector == 1 { return [.string(failure == nil ? "NEW_ENDPOINT" : "REGISTRATION_FAILED"), .string(detail ?? failure ?? "")] }
        var fields: [(String, DBusValue)] = [("success", .string(failure == nil ? "REGISTRATION_SUCCEEDED" : "REGISTRATION_FAILED"))]
        if let failure { fields.append(("reason", .string(failure))) }
        if let detail { fields.append(("message", .string(detail))) }
        return [.stringVariants(fields)]
    }

    /// A connector call: its interface and arguments.
    static func newEndpoint(token: String, endpoint: String, connector: Int) -> (String, [DBusValue]) {
        connector == 1
            ? (connector1, [.string(token), .string(endpoint)])
            : (connector2, [.stringVariants([("token", .string(token)), ("endpoint", .string(endpoint))])])
    }

    static func message(token: String, bytes: Data, id: String, connector: Int) -> (String, [DBusValue]) {
        connector == 1
            ? (connector1, [.string(token), .bytes([UInt8](bytes)), .string(id)])
            : (connector2, [.stringVariants([("token", .string(token)), ("message", .bytes([UInt8](bytes))), ("id", .string(id))])])
    }

    static func unregistered(token: String, connector: Int) -> (String, [DBusValue]) {
        connector == 1 ? (connector1, [.string(token)]) : (connector2, [.stringVariants([("token", .string(token))])])
    }

    /// What Introspect answers for the distributor's object.
    static let introspection = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        <node>
          <interface name="org.unifiedpush.Distributor2">
            <method name="Register"><arg name="args" type="a{sv}" direction="in"/><arg name="res" type="a{sv}" direction="out"/></method>
            <method name="Unregister"><arg name="args" type="a{sv}" direction="in"/><arg name="res" type="a{sv}" direction="out"/></method>
          </interface>
          <interface name="org.unifiedpush.Distributor1">
            <method name="Register">
              <arg name="serviceName" type="s" direction="in"/><arg name="token" type="s" direction="in"/>
              <arg name="description" type="s" direction="in"/><arg name="registrationResult" type="s" direction="out"/>
              <arg name="registrationResultReason" type="s" direction="out"/>
            </method>
            <method name="Unregister"><arg name="token" type="s" direction="in"/></method>
          </interface>
          <interface name="org.freedesktop.DBus.Introspectable">
            <method name="Introspect"><arg name="xml" type="s" direction="out"/></method>
          </interface>
        </node>
        """
}

struct UnifiedPushRegistration: Equatable {
    var service: String
    var token: String
    var description: String?
    var vapid: String?
    var connector: Int
}
