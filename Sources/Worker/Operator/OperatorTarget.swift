import DeliveryCore
import Foundation
import UUIDText

/// What `pushizo-worker pause` and `resume` act on (docs/operations.md, "Operator commands"): one app's channel
/// to a provider (`app_channels`), a whole app (`apps.paused_until`), or the whole fleet
/// (`fleet_settings.paused_until`, migration 0028).
public enum OperatorTarget: Sendable, Equatable, CustomStringConvertible {
    case channel(app: UUID, provider: Provider)
    case app(UUID)
    case fleet

    /// `operator_actions.scope`: `channel`, `app` or `fleet`.
    public var scope: String {
        switch self {
        case .channel: "channel"
        case .app: "app"
        case .fleet: "fleet"
        }
    }

    /// The app, for a channel or an app.
    public var appID: UUID? {
        switch self {
        case .channel(let app, _), .app(let app): app
        case .fleet: nil
        }
    }

    /// The provider, for a channel.
    public var provider: Provider? {
        if case .channel(_, let provider) = self { return provider }
        return nil
    }

    /// `app <id> <provider> channel`, `app <id>`, `the fleet`.
    public var description: String {
        switch self {
        case .channel(let app, let provider): "app \(CanonicalUUIDText.format(app)) \(provider.rawValue) channel"
        case .app(let app): "app \(CanonicalUUIDText.format(app))"
        case .fleet: "the fleet"
        }
    }
}
