import Foundation
import HubProtocol

/// One line of a bulk job's input: an installation as the installations API writes it (JSON), or
/// a registration description as the registrations API writes it (XML, bare as Notification Hubs'
/// own job files have it, or in an Atom entry).
public enum ImportLine {
    /// The installation a line stands for. A registration without a `RegistrationId` gets a new one.
    public static func installation(_ line: Data) throws -> Installation {
        guard let first = line.first(where: { !Self.isSpace($0) }) else {
            throw HubError(.invalidPayload, "the line is empty; give one installation or registration per line")
        }
        switch first {
        case UInt8(ascii: "{"):
            let installation = try InstallationJSON.decode(line)
            guard !installation.installationId.isEmpty else {
                throw HubError(.invalidArgument, "the installation needs an installationId")
            }
            return installation
        case UInt8(ascii: "<"):
            let description = try RegistrationXML.parse(entry(line))
            let id = description.fields["RegistrationId"]?.trimmingCharacters(in: .whitespaces)
            return try RegistrationXML.installation(description, id: id.flatMap { $0.isEmpty ? nil : $0 } ?? RegistrationXML.newRegistrationId())
        default:
            throw HubError(
                .invalidPayload, "the line is neither an installation as JSON ({\"installationId\": …}) nor a registration description as XML (<…RegistrationDescription>)")
        }
    }

    /// The installation id a delete line names: a JSON installation's `installationId`, a
    /// registration's `RegistrationId`, or the line itself when it is a bare id.
    public static func installationId(_ line: Data) throws -> String {
        guard let first = line.first(where: { !Self.isSpace($0) }) else {
            throw HubError(.invalidPayload, "the line is empty; give one installation id per line")
        }
        if first == UInt8(ascii: "{") {
            guard let id = JSONValue.parse(line)?["installationId"]?.stringValue, !id.isEmpty else {
                throw HubError(.invalidArgument, "the line needs an installationId")
            }
            return id
        }
        if first == UInt8(ascii: "<") {
            guard let id = try RegistrationXML.parse(entry(line)).fields["RegistrationId"]?.trimmingCharacters(in: .whitespaces), !id.isEmpty else {
                throw HubError(.invalidArgument, "the registration needs a <RegistrationId> to delete")
            }
            return id
        }
        let id = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespaces)
        guard !id.contains(where: { $0.isWhitespace }) else {
            throw HubError(.invalidArgument, "'\(id.prefix(80))' is not an installation id; give one id per line")
        }
        return id
    }

    /// A description in an Atom entry, as `RegistrationXML.parse` reads it.
    private static func entry(_ line: Data) -> Data {
        let text = String(decoding: line, as: UTF8.self)
        guard !text.contains("<entry") else { return line }
        return Data((#"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">"# + text + "</content></entry>").utf8)
    }

    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D }
}
