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
    public static let maximumUserTagsBytes = ClaimedColumnBounds.maximumUserTagsBytes

    /// User tags first, then the subscription's `language`, `country`, `timezone` (docs/wire-formats.md).
    /// Tags over ``maximumUserTagsBytes`` are not parsed (the claim already leaves them out), and a string
    /// tag longer than ``Placeholders/maximumOutputBytes`` is cut there on a scalar boundary: no filled
    /// text keeps more, so the cut changes nothing that is sent.
    /// - Parameter userTags: where a user's parsed tags are kept, so each user's are parsed once (`nil`:
    ///   parsed here).
    public static func placeholderValues(for delivery: ClaimedDelivery, userTags: UserTagsCache? = nil) -> PlaceholderValues {
        var tags: [String: JSONValue] = [:]
        if let tagsJSON = delivery.userTagsJSON, tagsJSON.utf8.count <= maximumUserTagsBytes {
            if let userTags, let userID = delivery.userID {
                tags = userTags.tags(userID: userID, text: tagsJSON, parse: parseTags)
            } else {
                tags = parseTags(tagsJSON)
            }
        }
        return PlaceholderValues(
            tags: tags, language: delivery.language, country: delivery.country, timezone: delivery.timezone)
    }

    /// `users.tags` text as placeholder values: an object's members, long strings cut; anything else none.
    static func parseTags(_ text: String) -> [String: JSONValue] {
        guard let object = (try? JSONValue(parsing: text))?.objectValue else { return [:] }
        return object.mapValues { value in
            guard case .string(let text) = value, text.utf8.count > Placeholders.maximumOutputBytes else { return value }
            return .string(Placeholders.prefix(text, maximumBytes: Placeholders.maximumOutputBytes))
        }
    }

    /// The placeholder values a delivery's payload needs: `nil` when the message's texts use no placeholder
    /// (``LocalizedText/usesPlaceholders(_:)``), which renders the same without them, so no tags are parsed.
    static func neededPlaceholderValues(
        for delivery: ClaimedDelivery, message: NotificationMessage, userTags: UserTagsCache?
    ) -> PlaceholderValues? {
        LocalizedText.usesPlaceholders(message) ? placeholderValues(for: delivery, userTags: userTags) : nil
    }

    /// The key under which `delivery`'s payload is shared with every delivery that renders alike
    /// (``RenderCache``), or `nil` when its texts use placeholders and so may differ per subscriber.
    /// - Parameter variant: the provider, plus anything of the subscription that changes the payload.
    public static func renderKey(for delivery: ClaimedDelivery, message: NotificationMessage, variant: String) -> RenderKey? {
        guard !LocalizedText.usesPlaceholders(message) else { return nil }
        return RenderKey(
            notificationID: delivery.notificationID, messageVersion: delivery.messageVersion, variant: variant,
            subscriberLanguage: delivery.language, appDefaultLanguage: delivery.defaultLanguage,
            campaignID: delivery.campaignID)
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

    /// - Parameter userTags: where users' parsed tags are kept (`nil`: parsed for this delivery).
    public static func apnsDelivery(
        for delivery: ClaimedDelivery, message: NotificationMessage, topic: String, now: Date,
        userTags: UserTagsCache? = nil
    ) -> APNsDelivery {
        APNsDelivery(
            deviceToken: delivery.token, environment: delivery.apnsEnvironment, topic: topic, apnsID: delivery.apnsID,
            message: message, subscriberLanguage: delivery.language, appDefaultLanguage: delivery.defaultLanguage,
            placeholderValues: neededPlaceholderValues(for: delivery, message: message, userTags: userTags), msgID: msgID(for: delivery),
            campaignID: delivery.campaignID, expiration: expiration(for: delivery, message: message), now: now)
    }

    /// - Parameter userTags: where users' parsed tags are kept (`nil`: parsed for this delivery).
    public static func fcmDelivery(
        for delivery: ClaimedDelivery, message: NotificationMessage, projectID: String, now: Date,
        userTags: UserTagsCache? = nil
    ) -> FCMDelivery {
        FCMDelivery(
            registrationToken: delivery.token, projectID: projectID, message: message,
            subscriberLanguage: delivery.language, appDefaultLanguage: delivery.defaultLanguage,
            placeholderValues: neededPlaceholderValues(for: delivery, message: message, userTags: userTags), msgID: msgID(for: delivery),
            campaignID: delivery.campaignID, now: now, expiration: expiration(for: delivery, message: message))
    }

    /// - Parameter userTags: where users' parsed tags are kept (`nil`: parsed for this delivery).
    public static func huaweiDelivery(
        for delivery: ClaimedDelivery, message: NotificationMessage, appID: String, userTags: UserTagsCache? = nil
    ) -> HuaweiDelivery {
        HuaweiDelivery(
            pushToken: delivery.token, appID: appID, message: message, subscriberLanguage: delivery.language,
            appDefaultLanguage: delivery.defaultLanguage,
            placeholderValues: neededPlaceholderValues(for: delivery, message: message, userTags: userTags),
            msgID: msgID(for: delivery), campaignID: delivery.campaignID)
    }

    /// - Parameter userTags: where users' parsed tags are kept (`nil`: parsed for this delivery).
    public static func webPushDelivery(
        for delivery: ClaimedDelivery, message: NotificationMessage, now: Date, userTags: UserTagsCache? = nil
    ) -> WebPushDelivery {
        WebPushDelivery(
            endpoint: delivery.token, message: message, subscriberLanguage: delivery.language,
            appDefaultLanguage: delivery.defaultLanguage, placeholderValues: neededPlaceholderValues(for: delivery, message: message, userTags: userTags),
            msgID: msgID(for: delivery), campaignID: delivery.campaignID, now: now,
            expiration: expiration(for: delivery, message: message))
    }
}
