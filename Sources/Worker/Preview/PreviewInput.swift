import DeliveryCore
import Foundation
import PushCrypto

/// A preview document turned into the same ``ClaimedDelivery`` the worker's claim would produce.
struct PreviewInput {
    var at: Date
    var delivery: ClaimedDelivery
    var storedMessage: MessageStore.StoredMessage
    /// The settings of the app's channel for the subscription's provider, if given.
    var channel: JSONValue?
    /// `delivery.max_attempts`: the worker's `PUSHIZO_MAX_ATTEMPTS` (default 10); a `delivery.attempt` past
    /// it is a claim abandoned that often, which fails `max_attempts`.
    var maxAttempts: Int
    static let defaultMaxAttempts = 10
    /// Seconds of quiet-hours release spread (`quiet_hours_spread`, default the worker's 900).
    var quietHoursSpread: Int
    /// `app.frequency_caps`, validated (`nil`: none, or malformed, which the worker treats as none).
    var frequencyCaps: FrequencyCaps?
    /// `recent_notifications`: instants at which earlier notifications were granted to this user (or
    /// subscription), newest or oldest first; when given, the caps are decided, otherwise only reported.
    var recentNotifications: [Date]?

    init(_ json: JSONValue, notes: inout [JSONValue]) throws(PreviewError) {
        guard case .object = json else { throw PreviewError("the preview document must be a JSON object") }
        let app = try Self.object(json, "app")
        let user = try Self.object(json, "user")
        let subscription = try Self.object(json, "subscription")
        let notification = try Self.object(json, "notification")
        let deliveryFields = try Self.object(json, "delivery")

        at = try Self.date(json["at"], "at") ?? Date()
        guard let message = notification["message"], case .object = message else {
            throw PreviewError("notification.message must be a JSON object (the notifications.message column)")
        }
        let text = message.jsonText
        // The worker measures the limit on PostgreSQL's text form of jsonb, which puts a space after every
        // `:` and `,`: measure the same way so both decide alike.
        let storedSize = text.utf8.count + Self.postgresSeparatorSpaces(message)
        storedMessage = MessageStore.StoredMessage(
            version: "preview", byteCount: storedSize,
            json: storedSize <= MessageCache.maximumMessageBytes ? text : nil)

        guard let platform = subscription["platform"]?.stringValue else {
            throw PreviewError("subscription.platform is required (ios, android, web or huawei)")
        }
        let notificationID = try Self.uuid(notification["id"], "notification.id") ?? Self.placeholderNotification
        let subscriptionID = try Self.uuid(subscription["id"], "subscription.id") ?? Self.placeholderSubscription
        if notification["id"] == nil || subscription["id"] == nil {
            notes.append("notification.id or subscription.id not given: the msgId is signed over placeholder ids")
        }
        var signingKey = [UInt8](repeating: 0, count: 32)
        if let text = app["signing_key"], !text.isNull {
            guard let encoded = text.stringValue, let key = Data(base64Encoded: encoded), !key.isEmpty else {
                throw PreviewError("app.signing_key must be base64 (as encode(signing_key, 'base64') prints it)")
            }
            signingKey = Array(key)
        } else {
            notes.append("app.signing_key not given: the msgId is signed with an all-zero key and will not verify")
        }
        let apnsID: UUID
        if let given = try Self.uuid(deliveryFields["apns_id"], "delivery.apns_id") {
            apnsID = given
        } else {
            // The worker draws a random apns-id once per delivery; a preview derives a stable one.
            let digest = SHA256.hash(Array((notificationID.uuidString + subscriptionID.uuidString).utf8))
            apnsID = Self.uuid(fromBytes: Array(digest.prefix(16)))
            // Only an APNs request carries it (the apns-id header).
            if Platform(platform).provider == .apns {
                notes.append("delivery.apns_id not given: derived from the ids (the worker draws one per delivery)")
            }
        }
        let attempt = try Self.int(deliveryFields["attempt"], "delivery.attempt", in: 1...1_000) ?? 1
        maxAttempts = try Self.int(deliveryFields["max_attempts"], "delivery.max_attempts", in: 1...100) ?? Self.defaultMaxAttempts
        var channels: [String: JSONValue] = [:]
        if let value = app["channels"], !value.isNull {
            guard let members = value.objectValue else {
                throw PreviewError("app.channels must be an object keyed by provider (apns, fcm, webpush, huawei)")
            }
            channels = members
        }
        let provider = Platform(platform).provider?.rawValue
        let channel = provider.flatMap { channels[$0] }
        if let channel, channel.objectValue == nil {
            throw PreviewError("app.channels.\(provider ?? "?") must be an object")
        }
        self.channel = channel
        let sendAfter = try Self.date(notification["send_after"], "notification.send_after")
        let createdAt = try Self.date(notification["created_at"], "notification.created_at")
        let start = sendAfter ?? createdAt ?? at
        delivery = ClaimedDelivery(
            id: 0, fence: 0, attempt: attempt, notificationID: notificationID, subscriptionID: subscriptionID,
            appID: try Self.uuid(app["id"], "app.id") ?? Self.placeholderApp, apnsID: apnsID,
            messageVersion: "preview",
            campaignID: try Self.string(notification["campaign_id"], "notification.campaign_id"),
            notificationStatus: try Self.string(notification["status"], "notification.status") ?? "expanded",
            notificationStart: start,
            platform: platform,
            token: try Self.string(subscription["token"], "subscription.token") ?? "",
            apnsEnvironment: try Self.string(subscription["apns_environment"], "subscription.apns_environment"),
            language: try Self.string(subscription["language"], "subscription.language"),
            timezone: try Self.string(subscription["timezone"], "subscription.timezone"),
            country: try Self.string(subscription["country"], "subscription.country"),
            subscriptionStatus: try Self.string(subscription["status"], "subscription.status") ?? "active",
            tokenUpdatedAt: at,
            userTagsJSON: try Self.tags(user["tags"], notes: &notes),
            defaultLanguage: try Self.string(app["default_language"], "app.default_language") ?? "en",
            defaultTimezone: try Self.string(app["default_timezone"], "app.default_timezone"),
            signingKey: signingKey,
            channelProvider: channel == nil ? nil : provider,
            channelSettingsJSON: channel?.jsonText,
            channelEndpoint: try Self.string(channel?["endpoint"], "app.channels.\(provider ?? "?").endpoint"),
            channelPausedUntil: try Self.date(channel?["paused_until"], "app.channels.\(provider ?? "?").paused_until"))
        let quietStart = try Self.string(app["quiet_hours_start"], "app.quiet_hours_start")
        let quietEnd = try Self.string(app["quiet_hours_end"], "app.quiet_hours_end")
        do {
            _ = try QuietHoursWindow(start: quietStart, end: quietEnd)
        } catch {
            throw PreviewError("app.\(error.field): \(error.message)")
        }
        delivery.quietHoursStart = quietStart
        delivery.quietHoursEnd = quietEnd
        quietHoursSpread = try Self.int(json["quiet_hours_spread"], "quiet_hours_spread", in: 0...86_400) ?? 900
        if let caps = app["frequency_caps"], !caps.isNull {
            do {
                let parsed = try FrequencyCaps(parsing: caps)
                frequencyCaps = parsed.isEmpty ? nil : parsed
            } catch {
                frequencyCaps = nil
                notes.append(.string("app.frequency_caps is malformed (\(error.description)): the worker treats this app's caps as off"))
            }
        } else {
            frequencyCaps = nil
        }
        if let recent = json["recent_notifications"], !recent.isNull {
            guard let items = recent.arrayValue else {
                throw PreviewError("recent_notifications must be an array of RFC 3339 date-times")
            }
            var dates: [Date] = []
            for (index, item) in items.enumerated() {
                guard let date = try Self.date(item, "recent_notifications[\(index)]") else {
                    throw PreviewError("recent_notifications[\(index)] must be an RFC 3339 date-time")
                }
                dates.append(date)
            }
            recentNotifications = dates
        } else {
            recentNotifications = nil
        }
    }

    static let placeholderApp = UUID(uuidString: "00000000-0000-4000-8000-00000000a990")!
    static let placeholderNotification = UUID(uuidString: "00000000-0000-4000-8000-00000000a991")!
    static let placeholderSubscription = UUID(uuidString: "00000000-0000-4000-8000-00000000a992")!

    private static func object(_ json: JSONValue, _ key: String) throws(PreviewError) -> [String: JSONValue] {
        guard let value = json[key], !value.isNull else { return [:] }
        guard let members = value.objectValue else { throw PreviewError("\(key) must be an object") }
        return members
    }

    private static func string(_ value: JSONValue?, _ field: String) throws(PreviewError) -> String? {
        guard let value, !value.isNull else { return nil }
        guard let text = value.stringValue else { throw PreviewError("\(field) must be a string") }
        return text
    }

    private static func int(_ value: JSONValue?, _ field: String, in range: ClosedRange<Int64>) throws(PreviewError) -> Int? {
        guard let value, !value.isNull else { return nil }
        guard let number = value.int64Value, range.contains(number) else {
            throw PreviewError("\(field) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return Int(number)
    }

    private static func uuid(_ value: JSONValue?, _ field: String) throws(PreviewError) -> UUID? {
        guard let text = try string(value, field) else { return nil }
        guard let id = UUID(uuidString: text) else { throw PreviewError("\(field) is not a UUID") }
        return id
    }

    private static func date(_ value: JSONValue?, _ field: String) throws(PreviewError) -> Date? {
        guard let text = try string(value, field) else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = formatter.date(from: text) { return date }
        formatter.formatOptions = [.withInternetDateTime]
        guard let date = formatter.date(from: text) else {
            throw PreviewError("\(field) is not an RFC 3339 date-time (e.g. 2026-11-29T21:30:00+03:00)")
        }
        return date
    }

    /// `user.tags` as JSON text; `nil` (no tags, as the worker's claim reads them) when PostgreSQL would
    /// print them longer than ``DeliveryRendering/maximumUserTagsBytes``.
    private static func tags(_ value: JSONValue?, notes: inout [JSONValue]) throws(PreviewError) -> String? {
        guard let value, !value.isNull else { return nil }
        guard value.objectValue != nil else { throw PreviewError("user.tags must be an object") }
        let text = value.jsonText
        let postgresBytes = text.utf8.count + postgresSeparatorSpaces(value)
        guard postgresBytes <= DeliveryRendering.maximumUserTagsBytes else {
            notes.append(
                .string(
                    "user.tags is \(postgresBytes) bytes as PostgreSQL prints it, over the "
                        + "\(DeliveryRendering.maximumUserTagsBytes)-byte limit: the worker renders placeholders "
                        + "as if the user had no tags"))
            return nil
        }
        return text
    }

    /// Spaces PostgreSQL's jsonb output adds to the compact form: one after each `:` and each `,`.
    static func postgresSeparatorSpaces(_ value: JSONValue) -> Int {
        switch value {
        case .object(let members):
            return members.count + max(0, members.count - 1) + members.values.reduce(0) { $0 + postgresSeparatorSpaces($1) }
        case .array(let elements):
            return max(0, elements.count - 1) + elements.reduce(0) { $0 + postgresSeparatorSpaces($1) }
        default:
            return 0
        }
    }

    private static func uuid(fromBytes bytes: [UInt8]) -> UUID {
        var bytes = bytes
        bytes[6] = (bytes[6] & 0x0F) | 0x40  // version 4 layout, so APNs's apns-id check accepts it
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                           bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
    }
}
