import Foundation
import Postgres

extension ClaimedDelivery {
    /// Reads one row of the claim statement, its columns found through `columns` (looked up once per result).
    /// - Throws: ``PostgresError`` (`decodingFailed`) when a column is missing or cannot be read.
    /// - Parameter repeats: the last values of the columns that repeat down a claim (one app's settings on each
    ///   of its deliveries), shared with the result's other rows so they are read once.
    /// - Parameter pages: the rows are a leased page's (their `id` is `delivery_pages.id`), not `deliveries` rows.
    init(
        claimedRow row: PostgresRow, columns c: ClaimedColumns, repeats r: inout ClaimedColumns.Repeats, pages: Bool = false
    ) throws {
        self.init(
            id: try c.id.decode(Int64.self, row),
            fence: try c.fence.decode(Int64.self, row),
            attempt: try c.attempt.decode(Int.self, row),
            notificationID: try c.notificationID.decode(UUID.self, row, repeating: &r.notificationID),
            subscriptionID: try c.subscriptionID.decode(UUID.self, row),
            appID: try c.appID.decode(UUID.self, row, repeating: &r.appID),
            apnsID: try c.apnsID.decode(UUID.self, row),
            messageVersion: try c.messageVersion.decode(String.self, row, repeating: &r.messageVersion),
            campaignID: try c.campaignID.decodeIfPresent(String.self, row, repeating: &r.campaignID),
            notificationStatus: try c.notificationStatus.decode(String.self, row, repeating: &r.notificationStatus),
            notificationStart: try c.notificationStart.decode(Date.self, row, repeating: &r.notificationStart),
            platform: try c.platform.decode(String.self, row),
            token: try c.token.decode(String.self, row),
            apnsEnvironment: try c.apnsEnvironment.decodeIfPresent(String.self, row),
            language: try c.language.decodeIfPresent(String.self, row),
            timezone: try c.timezone.decodeIfPresent(String.self, row),
            country: try c.country.decodeIfPresent(String.self, row),
            subscriptionStatus: try c.subscriptionStatus.decode(String.self, row),
            tokenUpdatedAt: try c.tokenUpdatedAt.decode(Date.self, row),
            userTagsJSON: try c.userTags.decodeIfPresent(String.self, row),
            userID: try c.userID.decodeIfPresent(UUID.self, row),
            webP256DH: try c.webP256DH.decodeIfPresent(String.self, row),
            webAuth: try c.webAuth.decodeIfPresent(String.self, row),
            defaultLanguage: try c.defaultLanguage.decodeIfPresent(String.self, row),
            defaultTimezone: try c.defaultTimezone.decodeIfPresent(String.self, row, repeating: &r.defaultTimezone),
            quietHoursStart: try c.quietHoursStart.decodeIfPresent(String.self, row),
            quietHoursEnd: try c.quietHoursEnd.decodeIfPresent(String.self, row),
            signingKey: try c.signingKey.decode([UInt8].self, row, repeating: &r.signingKey),
            frequencyCapsJSON: try c.frequencyCaps.decodeIfPresent(String.self, row, repeating: &r.frequencyCaps),
            channelProvider: try c.channelProvider.decodeIfPresent(String.self, row),
            channelSettingsJSON: try c.channelSettings.decodeIfPresent(String.self, row, repeating: &r.channelSettings),
            channelEndpoint: try c.channelEndpoint.decodeIfPresent(String.self, row, repeating: &r.channelEndpoint),
            channelPausedUntil: try c.channelPausedUntil.decodeIfPresent(Date.self, row),
            uncountedRetries: try c.uncountedRetries.decodeIfPresent(Int.self, row) ?? 0)
        if pages { source = .page(try c.id.decode(Int64.self, row)) }
        localDueAt = try c.localDueAt.decodeIfPresent(Date.self, row)
        rescuedFrom = try c.rescuedFrom.decodeIfPresent(String.self, row)
        oversizedColumns = (try c.oversizedColumns.decodeIfPresent(String.self, row) ?? "")
            .split(separator: ",").map(String.init)
    }
}

/// The claim statement's columns, each looked up by name once per result instead of once per row and column.
/// A class: as a struct of 36 names, each row's decoding copied it, retaining and releasing every name.
final class ClaimedColumns {
    /// One column: its name and its index in the result (nil when the result has no such column, which each
    /// row's decoding then reports as the name-based lookup does).
    struct Column {
        let name: String
        let index: Int?

        func decode<T: PostgresDecodable>(_ type: T.Type, _ row: PostgresRow) throws -> T {
            guard let index else { return try row.decode(type, name) }
            return try row.decode(type, at: index)
        }

        func decodeIfPresent<T: PostgresDecodable>(_ type: T.Type, _ row: PostgresRow) throws -> T? {
            guard let index else { return try row.decodeIfPresent(type, name) }
            return try row.decodeIfPresent(type, at: index)
        }

        func decode<T: PostgresDecodable>(_ type: T.Type, _ row: PostgresRow, repeating last: inout PostgresRepeatedValue<T>) throws -> T {
            guard let value = try decodeIfPresent(type, row, repeating: &last) else { return try decode(type, row) }
            return value
        }

        func decodeIfPresent<T: PostgresDecodable>(
            _ type: T.Type, _ row: PostgresRow, repeating last: inout PostgresRepeatedValue<T>
        ) throws -> T? {
            guard let index else { return try row.decodeIfPresent(type, name) }
            return try row.decodeIfPresent(type, at: index, repeating: &last)
        }
    }

    /// The last value of each column that repeats down a claim: the app's and notification's, the same on
    /// each of their deliveries (a broadcast's rows come in runs of one notification), and costly to read again
    /// on every row: long text (a copy per row is an allocation) or parsed values (UUIDs, timestamps). A row's
    /// bytes are compared with the last ones (one memcmp) instead.
    struct Repeats {
        var notificationID = PostgresRepeatedValue<UUID>()
        var appID = PostgresRepeatedValue<UUID>()
        var notificationStatus = PostgresRepeatedValue<String>()
        var notificationStart = PostgresRepeatedValue<Date>()
        var messageVersion = PostgresRepeatedValue<String>()
        var campaignID = PostgresRepeatedValue<String>()
        var defaultTimezone = PostgresRepeatedValue<String>()
        var signingKey = PostgresRepeatedValue<[UInt8]>()
        var frequencyCaps = PostgresRepeatedValue<String>()
        var channelSettings = PostgresRepeatedValue<String>()
        var channelEndpoint = PostgresRepeatedValue<String>()
    }

    let id, fence, attempt, notificationID, subscriptionID, appID, apnsID, messageVersion, campaignID,
        notificationStatus, notificationStart, platform, token, apnsEnvironment, language, timezone, country,
        subscriptionStatus, tokenUpdatedAt, userTags, userID, webP256DH, webAuth, defaultLanguage,
        defaultTimezone, quietHoursStart, quietHoursEnd, signingKey, frequencyCaps, channelProvider,
        channelSettings, channelEndpoint, channelPausedUntil, uncountedRetries, localDueAt,
        rescuedFrom, oversizedColumns: Column

    init(_ result: PostgresQueryResult) {
        func column(_ name: String) -> Column { Column(name: name, index: result.columnIndex(name)) }
        id = column("id")
        fence = column("fence")
        attempt = column("attempt")
        notificationID = column("notification_id")
        subscriptionID = column("subscription_id")
        appID = column("app_id")
        apnsID = column("apns_id")
        messageVersion = column("message_version")
        campaignID = column("campaign_id")
        notificationStatus = column("notification_status")
        notificationStart = column("notification_start")
        platform = column("platform")
        token = column("token")
        apnsEnvironment = column("apns_environment")
        language = column("language")
        timezone = column("timezone")
        country = column("country")
        subscriptionStatus = column("subscription_status")
        tokenUpdatedAt = column("token_updated_at")
        userTags = column("user_tags")
        userID = column("user_id")
        webP256DH = column("web_p256dh")
        webAuth = column("web_auth")
        defaultLanguage = column("default_language")
        defaultTimezone = column("default_timezone")
        quietHoursStart = column("quiet_hours_start")
        quietHoursEnd = column("quiet_hours_end")
        signingKey = column("signing_key")
        frequencyCaps = column("frequency_caps")
        channelProvider = column("channel_provider")
        channelSettings = column("channel_settings")
        channelEndpoint = column("channel_endpoint")
        channelPausedUntil = column("channel_paused_until")
        uncountedRetries = column("uncounted_retries")
        localDueAt = column("local_due_at")
        rescuedFrom = column("rescued_from")
        oversizedColumns = column("oversized_columns")
    }
}
