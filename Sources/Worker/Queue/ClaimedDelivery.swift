import DeliveryCore
import Foundation

/// One delivery claimed by this worker, with everything needed to decide and send it, read in the claim's
/// single round trip. `fence` must accompany the completion (see ``DeliveryCompletion``).
///
/// A value type whose fields sit behind one reference, copied on write: a claimed delivery is copied several
/// times on its way (into its provider's send list, into the answer's closure, into its completion), and a copy
/// of some forty fields retained each of its strings, strings an app's rows share and so retained from two
/// threads at once. Behind one reference a copy is one retain; a change to a shared value copies its fields first.
public struct ClaimedDelivery: Sendable {
    /// The stored values (documented on the properties of the same names below).
    struct Fields: Sendable {
        var source: DeliverySource
        var fence: Int64
        var attempt: Int
        var notificationID: UUID
        var subscriptionID: UUID
        var appID: UUID
        var apnsID: UUID
        var messageVersion: String
        var campaignID: String?
        var notificationStatus: String
        var notificationStart: Date
        var platform: String
        var token: String
        var apnsEnvironment: String?
        var language: String?
        var timezone: String?
        var country: String?
        var subscriptionStatus: String
        var tokenUpdatedAt: Date
        var userTagsJSON: String?
        var userID: UUID? = nil
        var webP256DH: String? = nil
        var webAuth: String? = nil
        var defaultLanguage: String?
        var defaultTimezone: String?
        var quietHoursStart: String? = nil
        var quietHoursEnd: String? = nil
        var signingKey: [UInt8]
        var frequencyCapsJSON: String? = nil
        var channelProvider: String?
        var channelSettingsJSON: String?
        var channelEndpoint: String?
        var channelPausedUntil: Date?
        var uncountedRetries: Int = 0
        var localDueAt: Date? = nil
        var rescuedFrom: String? = nil
        var leaseExpiry: ContinuousClock.Instant? = nil
        var databaseClock: DatabaseClockReading? = nil
        var oversizedColumns: [String] = []
        var lane: Int32 = 0
    }

    /// `@unchecked Sendable`: `fields` is only written through ``ClaimedDelivery``'s setters, after
    /// `isKnownUniquelyReferenced` made sure no other value shares this storage.
    private final class Storage: @unchecked Sendable {
        var fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var storage: Storage

    init(_ fields: Fields) { storage = Storage(fields) }

    /// Memberwise, as the stored-property struct it was (tests and `preview` build deliveries by hand).
    init(
        id: Int64,
        fence: Int64,
        attempt: Int,
        notificationID: UUID,
        subscriptionID: UUID,
        appID: UUID,
        apnsID: UUID,
        messageVersion: String,
        campaignID: String?,
        notificationStatus: String,
        notificationStart: Date,
        platform: String,
        token: String,
        apnsEnvironment: String?,
        language: String?,
        timezone: String?,
        country: String?,
        subscriptionStatus: String,
        tokenUpdatedAt: Date,
        userTagsJSON: String?,
        userID: UUID? = nil,
        webP256DH: String? = nil,
        webAuth: String? = nil,
        defaultLanguage: String?,
        defaultTimezone: String?,
        quietHoursStart: String? = nil,
        quietHoursEnd: String? = nil,
        signingKey: [UInt8],
        frequencyCapsJSON: String? = nil,
        channelProvider: String?,
        channelSettingsJSON: String?,
        channelEndpoint: String?,
        channelPausedUntil: Date?,
        uncountedRetries: Int = 0,
        localDueAt: Date? = nil,
        leaseExpiry: ContinuousClock.Instant? = nil,
        oversizedColumns: [String] = []
    ) {
        self.init(Fields(
            source: .row(id),
            fence: fence,
            attempt: attempt,
            notificationID: notificationID,
            subscriptionID: subscriptionID,
            appID: appID,
            apnsID: apnsID,
            messageVersion: messageVersion,
            campaignID: campaignID,
            notificationStatus: notificationStatus,
            notificationStart: notificationStart,
            platform: platform,
            token: token,
            apnsEnvironment: apnsEnvironment,
            language: language,
            timezone: timezone,
            country: country,
            subscriptionStatus: subscriptionStatus,
            tokenUpdatedAt: tokenUpdatedAt,
            userTagsJSON: userTagsJSON,
            userID: userID,
            webP256DH: webP256DH,
            webAuth: webAuth,
            defaultLanguage: defaultLanguage,
            defaultTimezone: defaultTimezone,
            quietHoursStart: quietHoursStart,
            quietHoursEnd: quietHoursEnd,
            signingKey: signingKey,
            frequencyCapsJSON: frequencyCapsJSON,
            channelProvider: channelProvider,
            channelSettingsJSON: channelSettingsJSON,
            channelEndpoint: channelEndpoint,
            channelPausedUntil: channelPausedUntil,
            uncountedRetries: uncountedRetries,
            localDueAt: localDueAt,
            leaseExpiry: leaseExpiry,
            oversizedColumns: oversizedColumns))
    }

    /// The storage, copied first when another value shares it.
    private mutating func unique() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(storage.fields) }
        return storage
    }

    /// The row or page this delivery is leased through: its completion is fenced on it.
    public var source: DeliverySource {
        get { storage.fields.source }
        set { unique().fields.source = newValue }
    }

    /// The fencing token this claim got; a completion with an older fence is ignored by the database.
    public var fence: Int64 {
        get { storage.fields.fence }
        set { unique().fields.fence = newValue }
    }

    /// 1 for the first send attempt; every claim counts one.
    public var attempt: Int {
        get { storage.fields.attempt }
        set { unique().fields.attempt = newValue }
    }

    public var notificationID: UUID {
        get { storage.fields.notificationID }
        set { unique().fields.notificationID = newValue }
    }

    public var subscriptionID: UUID {
        get { storage.fields.subscriptionID }
        set { unique().fields.subscriptionID = newValue }
    }

    public var appID: UUID {
        get { storage.fields.appID }
        set { unique().fields.appID = newValue }
    }

    /// Stable per delivery: APNs's `apns-id` on every attempt.
    public var apnsID: UUID {
        get { storage.fields.apnsID }
        set { unique().fields.apnsID = newValue }
    }

    // notifications
    /// The notification row's version (`xmin`): the message is fetched once per notification and version
    /// and cached, rather than shipped with every claimed row (a broadcast's message is the same for all).
    public var messageVersion: String {
        get { storage.fields.messageVersion }
        set { unique().fields.messageVersion = newValue }
    }

    public var campaignID: String? {
        get { storage.fields.campaignID }
        set { unique().fields.campaignID = newValue }
    }

    public var notificationStatus: String {
        get { storage.fields.notificationStatus }
        set { unique().fields.notificationStatus = newValue }
    }

    /// `coalesce(send_after, created_at)`: the instant the message's `ttl` counts from.
    public var notificationStart: Date {
        get { storage.fields.notificationStart }
        set { unique().fields.notificationStart = newValue }
    }

    // subscriptions
    public var platform: String {
        get { storage.fields.platform }
        set { unique().fields.platform = newValue }
    }

    public var token: String {
        get { storage.fields.token }
        set { unique().fields.token = newValue }
    }

    public var apnsEnvironment: String? {
        get { storage.fields.apnsEnvironment }
        set { unique().fields.apnsEnvironment = newValue }
    }

    public var language: String? {
        get { storage.fields.language }
        set { unique().fields.language = newValue }
    }

    public var timezone: String? {
        get { storage.fields.timezone }
        set { unique().fields.timezone = newValue }
    }

    public var country: String? {
        get { storage.fields.country }
        set { unique().fields.country = newValue }
    }

    public var subscriptionStatus: String {
        get { storage.fields.subscriptionStatus }
        set { unique().fields.subscriptionStatus = newValue }
    }

    /// Compared before invalidating, so a token re-registered meanwhile is never marked invalid.
    public var tokenUpdatedAt: Date {
        get { storage.fields.tokenUpdatedAt }
        set { unique().fields.tokenUpdatedAt = newValue }
    }

    /// `users.tags` of the subscription's user as JSON text (`nil` for an anonymous subscription, and for
    /// tags over ``ClaimedColumnBounds/maximumUserTagsBytes``, which the claim does not read), for
    /// placeholders.
    public var userTagsJSON: String? {
        get { storage.fields.userTagsJSON }
        set { unique().fields.userTagsJSON = newValue }
    }

    /// `subscriptions.user_id` (`nil` for an anonymous subscription).
    public var userID: UUID? {
        get { storage.fields.userID }
        set { unique().fields.userID = newValue }
    }

    /// `subscriptions.web_p256dh` / `web_auth` (base64url, RFC 8291 §2): a web subscription's keys, `nil`
    /// for other platforms.
    public var webP256DH: String? {
        get { storage.fields.webP256DH }
        set { unique().fields.webP256DH = newValue }
    }

    public var webAuth: String? {
        get { storage.fields.webAuth }
        set { unique().fields.webAuth = newValue }
    }

    // apps
    public var defaultLanguage: String? {
        get { storage.fields.defaultLanguage }
        set { unique().fields.defaultLanguage = newValue }
    }

    public var defaultTimezone: String? {
        get { storage.fields.defaultTimezone }
        set { unique().fields.defaultTimezone = newValue }
    }

    /// `apps.quiet_hours_start` / `quiet_hours_end` as PostgreSQL prints `time` (`22:00:00`); both nil = off.
    public var quietHoursStart: String? {
        get { storage.fields.quietHoursStart }
        set { unique().fields.quietHoursStart = newValue }
    }

    public var quietHoursEnd: String? {
        get { storage.fields.quietHoursEnd }
        set { unique().fields.quietHoursEnd = newValue }
    }

    public var signingKey: [UInt8] {
        get { storage.fields.signingKey }
        set { unique().fields.signingKey = newValue }
    }

    /// `apps.frequency_caps` as JSON text (`[{"max": N, "per_seconds": W}]`; `nil` or `[]` = no caps).
    public var frequencyCapsJSON: String? {
        get { storage.fields.frequencyCapsJSON }
        set { unique().fields.frequencyCapsJSON = newValue }
    }

    // app_channels (nil when the app has no channel for this platform's provider)
    public var channelProvider: String? {
        get { storage.fields.channelProvider }
        set { unique().fields.channelProvider = newValue }
    }

    public var channelSettingsJSON: String? {
        get { storage.fields.channelSettingsJSON }
        set { unique().fields.channelSettingsJSON = newValue }
    }

    public var channelEndpoint: String? {
        get { storage.fields.channelEndpoint }
        set { unique().fields.channelEndpoint = newValue }
    }

    public var channelPausedUntil: Date? {
        get { storage.fields.channelPausedUntil }
        set { unique().fields.channelPausedUntil = newValue }
    }

    /// `deliveries.uncounted_retries`: retries so far that spent no attempt.
    public var uncountedRetries: Int {
        get { storage.fields.uncountedRetries }
        set { unique().fields.uncountedRetries = newValue }
    }

    /// `deliveries.local_due_at`: the instant expansion scheduled this delivery for by the message's
    /// `delivery_time_of_day` (docs/local-time-delivery.md); `nil` when not scheduled by local time.
    public var localDueAt: Date? {
        get { storage.fields.localDueAt }
        set { unique().fields.localDueAt = newValue }
    }

    /// The `deliveries.leased_by` this claim took the delivery from: set when the row was claimed after another
    /// claim's lease on it ran out without a completion (that worker died, hung or lost the database), the
    /// worker's name as it wrote it (possibly this worker's own). `nil` for a delivery claimed after its
    /// completion rescheduled it, one never claimed before, and one leased at insert.
    public var rescuedFrom: String? {
        get { storage.fields.rescuedFrom }
        set { unique().fields.rescuedFrom = newValue }
    }

    /// When this worker's claim runs out, on this process's monotonic clock (set by the claim loop from the
    /// instant before the claim's statement, so never later than the real expiry); `nil` outside the claim
    /// loop (tests, `preview`): no lease guard.
    public var leaseExpiry: ContinuousClock.Instant? {
        get { storage.fields.leaseExpiry }
        set { unique().fields.leaseExpiry = newValue }
    }

    /// PostgreSQL's clock as the claim that leased this delivery read it (its `now()`); `nil` for deliveries
    /// built by hand (tests, `preview`).
    public var databaseClock: DatabaseClockReading? {
        get { storage.fields.databaseClock }
        set { unique().fields.databaseClock = newValue }
    }

    /// The instant this delivery is judged at (expiry, local time, quiet hours, channel pause, next attempt):
    /// PostgreSQL's clock carried forward from the claim's reading (``DatabaseClockReading/now(at:)``), so the
    /// worker judges by the clock the database judged `run_at` and the lease by (docs/clocks.md). Without a
    /// reading (deliveries built by hand) this worker's wall clock.
    public func judgedNow(at instant: ContinuousClock.Instant = .now) -> Date {
        storage.fields.databaseClock?.now(at: instant) ?? Date()
    }

    /// Columns of this delivery's rows whose text was longer than the claim reads (e.g.
    /// `subscriptions.token`); such values are not shipped to the worker, and the delivery fails
    /// `oversized_column`.
    /// The queue lane the delivery was claimed in (`deliveries.lane`): 0 on a single node (``QueueTopology``).
    public var lane: Int32 {
        get { storage.fields.lane }
        set { unique().fields.lane = newValue }
    }

    public var oversizedColumns: [String] {
        get { storage.fields.oversizedColumns }
        set { unique().fields.oversizedColumns = newValue }
    }
}

extension ClaimedDelivery {
    /// What frequency caps count against: the subscription's user, else the subscription itself
    /// (docs/frequency-caps.md).
    public var capKey: UUID { userID ?? subscriptionID }
}

extension DeliveryCompletion.Claim {
    public init(_ delivery: ClaimedDelivery) {
        self.init(
            appID: delivery.appID, notificationID: delivery.notificationID,
            subscriptionID: delivery.subscriptionID, attempt: delivery.attempt)
        apnsID = delivery.apnsID
    }
}

extension ClaimedDelivery {
    /// The claim's columns as the after-send policy (``CompletionFactory``) reads them.
    var completionFacts: ClaimFacts {
        var facts = ClaimFacts(
            source: source, fence: fence, attempt: attempt, uncountedRetries: uncountedRetries, appID: appID,
            notificationID: notificationID, subscriptionID: subscriptionID, apnsID: apnsID,
            notificationStart: notificationStart, tokenUpdatedAt: tokenUpdatedAt)
        facts.lane = lane
        return facts
    }
}

extension Array where Element == ClaimedDelivery {
    /// Bytes of row text a claimed batch keeps in memory while it is processed: each row's user tags (up to
    /// 64 KiB), token (up to 8 KiB) and campaign id, and each app's channel settings once (the claim decodes an
    /// app's repeated columns once, so its rows share that text). The claim loop bounds the sum over batches in
    /// flight, so slots full of the largest rows cannot hold `PUSHIZO_CONCURRENCY` times 72 KiB.
    var heldTextBytes: Int {
        var bytes = 0
        var apps = Set<UUID>()
        for delivery in self {
            bytes += (delivery.userTagsJSON?.utf8.count ?? 0) + delivery.token.utf8.count + (delivery.campaignID?.utf8.count ?? 0)
            if apps.insert(delivery.appID).inserted { bytes += delivery.channelSettingsJSON?.utf8.count ?? 0 }
        }
        return bytes
    }
}
