import Foundation
import Synchronization

/// An app's parsed channel (credentials, token manager, origin) per app, reused until the row's `settings`
/// JSON or `endpoint` changes, so a corrected key takes effect without a restart and nothing is parsed per
/// delivery. Shared by every provider sender.
final class ChannelCache<Channel: Sendable>: Sendable {
    private struct Entry: Sendable {
        var settingsJSON: String
        var endpoint: String?
        var channel: Channel
    }

    private let entries = Mutex<[UUID: Entry]>([:])

    /// The cached channel for the delivery's app, or the one `build` makes from the row's settings JSON
    /// (`{}` when the row has none) and endpoint.
    /// - Throws: whatever `build` throws; nothing is cached then.
    func channel(for delivery: ClaimedDelivery, build: (_ settingsJSON: String, _ endpoint: String?) throws -> Channel)
        throws -> Channel
    {
        let settingsJSON = delivery.channelSettingsJSON ?? "{}"
        if let cached = entries.withLock({ $0[delivery.appID] }),
            cached.settingsJSON == settingsJSON, cached.endpoint == delivery.channelEndpoint
        {
            return cached.channel
        }
        let channel = try build(settingsJSON, delivery.channelEndpoint)
        entries.withLock {
            $0[delivery.appID] = Entry(settingsJSON: settingsJSON, endpoint: delivery.channelEndpoint, channel: channel)
        }
        return channel
    }
}
