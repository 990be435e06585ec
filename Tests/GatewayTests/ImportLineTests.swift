import Foundation
import HubProtocol
import Registrations
import Testing

/// The lines of a bulk job's input, as the registration service reads them.
@Suite("Import lines")
struct ImportLineTests {
    static let ns = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"

    @Test("an installation as JSON, and a registration as XML, bare or in an Atom entry")
    func reads() throws {
        let json = try ImportLine.installation(Data(#"{"installationId":"i-1","platform":"FCMV1","pushChannel":"tok","tags":["a"]}"#.utf8))
        #expect(json.installationId == "i-1" && json.platform == "fcmv1" && json.tags == ["a"])
        let bare = #"<AppleRegistrationDescription xmlns="\#(Self.ns)"><RegistrationId>r-1</RegistrationId><Tags>a,b</Tags><DeviceToken>AB</DeviceToken></AppleRegistrationDescription>"#
        let apple = try ImportLine.installation(Data(bare.utf8))
        #expect(apple.installationId == "r-1" && apple.platform == "apns" && apple.tags == ["a", "b"] && apple.pushChannel == "AB")
        let entry = #"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">\#(bare)</content></entry>"#
        #expect(try ImportLine.installation(Data(entry.utf8)) == apple)
        // A registration without an id gets one, in Azure's shape.
        let unnamed = try ImportLine.installation(Data(bare.replacingOccurrences(of: "<RegistrationId>r-1</RegistrationId>", with: "").utf8))
        #expect(unnamed.installationId.split(separator: "-").count == 3)
        #expect(try ImportLine.installationId(Data("  r-9 ".utf8)) == "r-9")
        #expect(try ImportLine.installationId(Data(#"{"installationId":"i-2"}"#.utf8)) == "i-2")
        #expect(try ImportLine.installationId(Data(bare.utf8)) == "r-1")
    }

    @Test("a line that is neither, or an incomplete one, is refused with its code and what to give")
    func refuses() {
        let cases: [(String, ErrorCode)] = [
            ("hello", .invalidPayload), (#"{"installationId":"x","colour":1}"#, .unknownField), (#"{"platform":"linux","pushChannel":"c"}"#, .invalidPayload),
            (#"<GcmRegistrationDescription xmlns="\#(Self.ns)"><Tags>a</Tags></GcmRegistrationDescription>"#, .invalidArgument),
            ("<Nope/>", .invalidPayload),
        ]
        for (line, code) in cases {
            #expect(throws: HubError.self) { try ImportLine.installation(Data(line.utf8)) }
            do {
                _ = try ImportLine.installation(Data(line.utf8))
            } catch let error as HubError {
                #expect(error.code == code, "\(line): \(error.message)")
            } catch {}
        }
        #expect(throws: HubError.self) { try ImportLine.installationId(Data("two words".utf8)) }
    }
}
