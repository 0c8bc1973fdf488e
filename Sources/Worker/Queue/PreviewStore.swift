import DeliveryCore
import Foundation
import Postgres
import Providers

/// `preview --notification ID --subscription ID` (docs/preview.md, "From the database"): the preview document
/// read from the rows the worker's claim reads for that delivery (the app and its channel, the notification, the
/// subscription, its user, the queued delivery if any, the user's frequency-cap grants), in one read-only
/// statement, so ``Preview/run(_:egressPolicy:)`` decides and builds what the worker would send to that device now.
///
/// Credentials are not read into the document: the channel's settings give only their public members (the APNs
/// `topic`, FCM's `project_id` and `token_uri`, the `endpoint` override and the pause), as a preview document
/// holds them. An APNs certificate channel's topic comes from its certificate, read here and not printed.
public enum PreviewStore {
    /// Why there is nothing to preview: no such row.
    public struct Missing: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// The preview document for the delivery of `notification` to `subscription`.
    /// - Throws: ``Missing`` when either row does not exist or they belong to different apps; ``PostgresError``.
    public static func document(notification: UUID, subscription: UUID, on connection: PostgresConnection) throws
        -> JSONValue
    {
        let rows = try connection.query(documentSQL, [notification, subscription])
        guard let row = rows.first else {
            throw Missing(description: "no notification \(notification.uuidString.lowercased())")
        }
        guard try row.decode(Bool.self, "subscription_found") else {
            throw Missing(description: "no subscription \(subscription.uuidString.lowercased())")
        }
        guard try row.decode(Bool.self, "same_app") else {
            throw Missing(description: "the subscription belongs to another app than the notification")
        }
        var document = try JSONValue(parsing: Array(try row.decode(String.self, "document").utf8))
        if case .object(var members) = document, case .object(var app) = members["app"] ?? .null {
            var channels: [String: JSONValue] = [:]
            if let provider = try row.decodeIfPresent(String.self, "channel_provider") {
                let settings = (try? JSONValue(parsing: Array((try row.decodeIfPresent(String.self, "channel_settings") ?? "{}").utf8))) ?? .object([:])
                var channel = publicSettings(settings, provider: provider)
                channel["endpoint"] = try row.decodeIfPresent(String.self, "channel_endpoint").map(JSONValue.string) ?? .null
                channel["paused_until"] = try row.decodeIfPresent(String.self, "channel_paused_until").map(JSONValue.string) ?? .null
                channels[provider] = .object(channel)
            }
            app["channels"] = .object(channels)
            members["app"] = .object(app)
            document = .object(members)
        }
        return document
    }

    /// The members of a channel's settings a preview reads, none of them a secret: `topic` (APNs; from the
    /// certificate for a certificate channel without one), `authentication: "certificate"` for an APNs
    /// certificate channel (its requests carry no provider token, and some push types go only one way:
    /// ``APNsPushType/credentials``), `project_id` and `token_uri` at the top level or in `service_account` (FCM),
    /// `app_id`, `client_id` and `token_uri` (Huawei: never `client_secret`),
    /// `declarative` (Web Push: which subscriptions get the Declarative Web Push form).
    static func publicSettings(_ settings: JSONValue, provider: String) -> [String: JSONValue] {
        var kept: [String: JSONValue] = [:]
        if provider == Provider.webpush.rawValue, let declarative = settings[WebPushDeclarativePolicy.settingsKey] {
            kept[WebPushDeclarativePolicy.settingsKey] = declarative
        }
        for name in ["topic", "project_id", "token_uri", "app_id", "client_id"] {
            if let value = settings[name]?.stringValue { kept[name] = .string(value) }
        }
        if let account = settings["service_account"] {
            var members: [String: JSONValue] = [:]
            for name in ["project_id", "token_uri"] {
                if let value = account[name]?.stringValue { members[name] = .string(value) }
            }
            kept["service_account"] = .object(members)
        }
        if provider == Provider.apns.rawValue, APNsCertificateCredentials.isCertificateSettings(settings) {
            kept["authentication"] = "certificate"
        }
        if provider == Provider.apns.rawValue, kept["topic"] == nil, APNsCertificateCredentials.isCertificateSettings(settings),
            let credentials = try? APNsCertificateCredentials(settings: settings)
        {
            kept["topic"] = .string(credentials.topic)
        }
        return kept
    }

    /// `expression` (a `timestamptz`) as RFC 3339 text in UTC with milliseconds, as the preview document takes it;
    /// `infinity` as the last instant of 9999, NULL as NULL.
    static func instant(_ expression: String) -> String {
        """
        CASE WHEN \(expression) = 'infinity' THEN '9999-12-31T23:59:59.999Z'
             WHEN \(expression) = '-infinity' THEN '0001-01-01T00:00:00.000Z'
             ELSE to_char(\(expression) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
        """
    }

    /// `$1` the notification, `$2` the subscription. One row when the notification exists: the document without
    /// the channels (`document`, jsonb as text), whether the subscription exists and shares the notification's app,
    /// and the subscription's provider's channel (`channel_*`; its settings as text, for ``publicSettings``).
    /// Instants are RFC 3339 in UTC with milliseconds; `infinity` is the last instant of 9999.
    static let documentSQL = """
        WITH n AS (SELECT * FROM notifications WHERE id = $1),
        s AS (SELECT * FROM subscriptions WHERE id = $2),
        a AS (SELECT * FROM apps WHERE id = (SELECT app_id FROM n)),
        u AS (SELECT * FROM users WHERE id = (SELECT user_id FROM s)),
        d AS (SELECT * FROM deliveries WHERE notification_id = $1 AND subscription_id = $2),
        ch AS (
            SELECT * FROM app_channels WHERE app_id = (SELECT app_id FROM n) AND provider = (
                SELECT CASE platform WHEN 'ios' THEN 'apns' WHEN 'android' THEN 'fcm' WHEN 'web' THEN 'webpush' WHEN 'huawei' THEN 'huawei' END FROM s)
        )
        SELECT
            EXISTS (SELECT 1 FROM s) AS subscription_found,
            coalesce((SELECT s.app_id = n.app_id FROM s), false) AS same_app,
            jsonb_build_object(
                'at', \(instant("now()")),
                'app', (SELECT jsonb_build_object(
                    'id', a.id, 'default_language', a.default_language, 'default_timezone', a.default_timezone,
                    'signing_key', encode(a.signing_key, 'base64'),
                    'quiet_hours_start', a.quiet_hours_start::text, 'quiet_hours_end', a.quiet_hours_end::text,
                    'frequency_caps', a.frequency_caps) FROM a),
                'user', coalesce((SELECT jsonb_build_object('external_id', u.external_id, 'tags', u.tags) FROM u), '{}'),
                'subscription', (SELECT jsonb_build_object(
                    'id', s.id, 'platform', s.platform, 'token', s.token, 'apns_environment', s.apns_environment,
                    'language', s.language, 'timezone', s.timezone, 'country', s.country, 'status', s.status,
                    'kind', s.kind) FROM s),
                'notification', jsonb_build_object(
                    'id', n.id, 'campaign_id', n.campaign_id, 'message', n.message, 'status', n.status,
                    'send_after', \(instant("n.send_after")), 'created_at', \(instant("n.created_at"))),
                'delivery', coalesce(
                    (SELECT jsonb_build_object('attempt', d.attempt + 1, 'apns_id', d.apns_id) FROM d), '{}'),
                'recent_notifications', (
                    SELECT CASE
                        WHEN a.frequency_caps IS NULL THEN NULL
                        -- Granted already (another device of the user, an earlier attempt): the worker reuses it.
                        WHEN EXISTS (SELECT 1 FROM frequency_cap_grants g WHERE g.app_id = a.id
                                     AND g.cap_key = coalesce(s.user_id, s.id) AND g.notification_id = n.id) THEN '[]'
                        ELSE coalesce((SELECT jsonb_agg(\(instant("g.granted_at"))) FROM frequency_cap_grants g
                                       WHERE g.app_id = a.id AND g.cap_key = coalesce(s.user_id, s.id)), '[]')
                    END FROM a LEFT JOIN s ON true)
            )::text AS document,
            (SELECT provider FROM ch) AS channel_provider,
            (SELECT settings::text FROM ch) AS channel_settings,
            (SELECT endpoint FROM ch) AS channel_endpoint,
            (SELECT \(instant("paused_until")) FROM ch) AS channel_paused_until
        FROM n
        """
}
