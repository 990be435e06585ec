import DispatchCore
import HubProtocol
import Push

/// A push service said a device's channel is gone: its installation goes, as Notification Hubs
/// removes registrations with expired channels, unless the device has registered another channel
/// since (the delete is conditional on the version that had the old one).
enum ChannelExpiry {
    static func deletion(for message: PushMessage, _ result: PushResult, index: InstallationIndex) -> InstallationDelete? {
        guard case .channelExpired = result, let installation = index.installation(message.installationId),
            installation.pushChannel == message.pushChannel
        else { return nil }
        return InstallationDelete(installationId: message.installationId, ifMatch: installation.etag)
    }
}

/// A push service named a device's channel anew (ADM's canonical registration id): the
/// installation's channel moves there, unless the device has registered another channel since
/// (the write is conditional on the version that had the old one).
enum ChannelMove {
    static func upsert(for message: PushMessage, _ result: PushResult, index: InstallationIndex) -> InstallationUpsert? {
        guard case .channelMoved(let channel) = result, var installation = index.installation(message.installationId),
            installation.pushChannel == message.pushChannel, channel != message.pushChannel
        else { return nil }
        let etag = installation.etag
        installation.pushChannel = channel
        return InstallationUpsert(installation: installation, ifMatch: etag)
    }
}
