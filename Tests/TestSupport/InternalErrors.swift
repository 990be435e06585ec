import HubProtocol

/// The message of the `internal` `HubError` that `body` throws, as a stored row that does not read
/// throws one; nil when it throws nothing, or another error.
public func internalErrorMessage(_ body: () throws -> Void) -> String? {
    do {
        try body()
        return nil
    } catch let error as HubError where error.code == .internal {
        return error.message
    } catch {
        return nil
    }
}
