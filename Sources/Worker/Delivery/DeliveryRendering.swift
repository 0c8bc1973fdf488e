import DeliveryCore
import Foundation
import Providers
import PushCrypto

/// What every provider's request factory needs from one claimed delivery, computed one way for the worker
/// and for `preview`: placeholder values (user tags, then subscription fields), the signed msgId, and the
/// message's own deadline.
public enum DeliveryRendering {
    /// The largest `users.tags` used for placeholders, in bytes of the `jsonb` as PostgreSQL prints it:
    /// 65,536. The claim reads no larger document (its user renders as having no tags: every placeholder
    /// takes its default), so one user's tags cost each claimed delivery at most this much to carry and
    /// parse. Tags are meant for short values (a name, a level); a payload holds 4 KB in all.
    public static let maximumUserTagsBytes = 65_536

    /// User tags first, then the subscription's `language`, `country`, `timezone` (docs/wire-formats.md).
    /// Tags over ``maximumUserTagsBytes`` are not parsed (the claim already leaves them out), and a string
    /// tag longer than ``Placeholders/maximumOutputBytes`` is cut there on a scalar boundary: no filled
    /// text keeps more, so the cut changes nothing that is sent.
    public static func placeholderValues(for delivery: ClaimedDelivery) -> PlaceholderValues {
        var tags: [String: JSONValue] = [:]
        if let tagsJSON = delivery.userTagsJSON, tagsJSON.utf8.count <= maximumUserTagsBytes,
           let object = (try? JSONValue(parsing: tagsJSON))?.objectValue
        {
            tags = object.mapValues { value in
                guard case .string(let text) = value, text.utf8.count > Placeholders.maximumOutputBytes else { return value }
                return .string(Placeholders.prefix(text, maximumBytes: Placeholders.maximumOutputBytes))
            }
        }
        return PlaceholderValues(
            tags: tags, language: delivery.language, country: delivery.country, timezone: delivery.timezone)
    }

    /// The signed msgId (docs/msgid.md) under the app's `signing_key`.
    public static func msgID(for delivery: ClaimedDelivery) -> String {
        MessageIDCodec.sign(
            notificationID: delivery.notificationID, subscriptionID: delivery.subscriptionID, key: delivery.signingKey)
    }

    /// `send_after` (else `created_at`) + `ttl`, or `nil` when the message sets no `ttl`; the factories take
    /// the earlier of it and `now + ttl`.
    public static func expiration(for delivery: ClaimedDelivery, message: NotificationMessage) -> Date? {
        message.ttl.map { delivery.notificationStart.addingTimeInterval(Double($0)) }
    }

    public static func apnsDelivery(
        for delivery: ClaimedDelivery, message: NotificationMessage, topic: String, now: Date
    ) -> APNsDelivery {
        APNsDelivery(
            deviceToken: delivery.token, environment: delivery.apnsEnvironment, topic: topic, apnsID: delivery.apnsID,
            message: message, subscriberLanguage: delivery.language, appDefaultLanguage: delivery.defaultLanguage,
            placeholderValues: placeholderValues(for: delivery), msgID: msgID(for: delivery),
            campaignID: delivery.campaignID, expiration: expiration(for: delivery, message: message), now: now)
    }

    public static func fcmDelivery(
        for delivery: ClaimedDelivery, message: NotificationMessage, projectID: String, now: Date
    ) -> FCMDelivery {
        FCMDelivery(
            registrationToken: delivery.token, projectID: projectID, message: message,
            subscriberLanguage: delivery.language, appDefaultLanguage: delivery.defaultLanguage,
            placeholderValues: placeholderValues(for: delivery), msgID: msgID(for: delivery),
            campaignID: delivery.campaignID, now: now, expiration: expiration(for: delivery, message: message))
    }

    public static func webPushDelivery(for delivery: ClaimedDelivery, message: NotificationMessage, now: Date)
        -> WebPushDelivery
    {
        WebPushDelivery(
            endpoint: delivery.token, message: message, subscriberLanguage: delivery.language,
            appDefaultLanguage: delivery.defaultLanguage, placeholderValues: placeholderValues(for: delivery),
            msgID: msgID(for: delivery), campaignID: delivery.campaignID, now: now,
            expiration: expiration(for: delivery, message: message))
    }
}
