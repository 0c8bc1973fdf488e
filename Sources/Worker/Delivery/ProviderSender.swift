import DeliveryCore
import Foundation

/// One provider's send path (APNs now; FCM and Web Push join later): credentials from the app's channel,
/// the request, the transport, and the classification of the answer. Never throws: transport failures,
/// bad credentials and refusals all become a ``DeliveryOutcome``.
public protocol ProviderSender: Sendable {
    /// `app_channels.provider` this sender serves: `apns`, `fcm` or `webpush`.
    var provider: String { get }
    func send(_ delivery: ClaimedDelivery, message: NotificationMessage, now: Date) async -> DeliveryOutcome
}
