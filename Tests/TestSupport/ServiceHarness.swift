import Auth
import Foundation
import HubProtocol
import ServiceKit

/// What the services' in-process handler tests share: a service context on a fresh data folder
/// (so with fresh keys), tokens signed with those keys, envelopes, and the code a call fails with.
public struct ServiceHarness {
    public let context: ServiceContext

    public init(service: String) throws {
        var config = HubConfig()
        config.dataDir = FileManager.default.temporaryDirectory.appendingPathComponent("\(service)-handlers-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: config.dataDir, withIntermediateDirectories: true)
        context = try ServiceContext.detached(name: service, config: config)
    }

    public var dataDir: String { context.config.dataDir }

    /// A shared-access token of the key named `name` (the full key by default), for the hub.
    public func sas(_ name: String = AccessKey.defaultFullName) -> String {
        context.token(for: context.keys.key(named: name)!)
    }

    public var full: String { sas(AccessKey.defaultFullName) }
    /// The namespace's root key, as the services sign for each other: it reaches every hub.
    public var root: String { context.serviceToken()! }
    public var listen: String { sas(AccessKey.defaultListenName) }

    public func envelope<R: HubRequest>(_ payload: R, auth: String?) -> Envelope<R> { Envelope(id: "1", auth: auth, payload: payload) }

    /// The code `body` fails with; nil when it succeeds.
    public func code(_ body: () throws -> Any) -> ErrorCode? { errorCode(of: body) }
}

/// The code of the `HubError` `body` throws (`internal` for any other error); nil when it succeeds.
public func errorCode(of body: () throws -> Any) -> ErrorCode? {
    do {
        _ = try body()
        return nil
    } catch {
        return (error as? HubError)?.code ?? .internal
    }
}

/// A value a handler's closure can change and a test read.
public final class Box<Value>: @unchecked Sendable {
    public var value: Value
    public init(_ value: Value) { self.value = value }
}
