import DeliveryCore
import Foundation
import UUIDText

/// Why an operator command refused to act (exit status 1, one line on
/// stderr); nothing was changed.
public enum OperatorError: Error, Equatable, CustomStringConvertible {
    case noApp(UUID)
    case noChannel(app: UUID, provider: Provider)
    case noNotification(UUID)
    case noFleetSettings
    case untilInThePast(Date)
    /// `retry` of a notification that is `canceled`.
    case notificationCanceled(UUID)

    public var description: String {
        switch self {
        case .noApp(let app): "no app \(CanonicalUUIDText.format(app))"
        case .noChannel(let app, let provider):
            "app \(CanonicalUUIDText.format(app)) has no \(provider.rawValue) channel (app_channels)"
        case .noNotification(let id): "no notification \(CanonicalUUIDText.format(id))"
        case .noFleetSettings: "fleet_settings has no row: run the migrations (0028)"
        case .untilInThePast(let date): "--until \(date.formatted(.iso8601)) is not in the future"
        case .notificationCanceled(let id):
            "notification \(CanonicalUUIDText.format(id)) is canceled: its failures are not retried"
        }
    }
}
