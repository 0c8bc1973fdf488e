/// `delivery_events.reason` (also `subscriptions.invalid_reason`, `app_channels.paused_reason` and
/// `deliveries.last_error`): why a delivery was not sent, or not yet. ``rawValue`` is the stored text, a pinned
/// contract (docs/producer-contract.md, docs/provider-answers.md): snake_case, never changed once written.
///
/// An open set, like APNSwift's `APNSError.ErrorReason`: the static members below are every reason the
/// worker's rules, its senders and the providers' classifiers write, and a provider may still answer with a
/// reason this list does not know (APNs's `reason` snake-cased, FCM's error code lower-cased,
/// ``http(status:)``), which is kept as it came through ``init(rawValue:)``. Code names a reason through a
/// static member; text is made from it only where a SQL parameter or a metric label is built.
public struct DeliveryReason: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    /// The stored text.
    public let rawValue: String

    /// A reason from its stored text, or one a provider answered with that no static member names.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    /// `http_<status>`: a provider's answer with no reason of its own (APNs without a `reason`, FCM without an
    /// error code, a Web Push status with no meaning of its own).
    public static func http(status: Int) -> DeliveryReason {
        DeliveryReason(rawValue: "http_\(status)")
    }

    /// A reason a provider wrote from its own text, or `nil` when that text is empty (a provider reason of
    /// punctuation only, for instance): the classifier then falls back to ``http(status:)``.
    public init?(providerText text: String) {
        guard !text.isEmpty else { return nil }
        self.init(rawValue: text)
    }
}

// MARK: - The worker's rules (DeliveryDecision, CompletionFactory, the pipeline)

extension DeliveryReason {
    /// `failed`: claimed more times than `PUSHIZO_MAX_ATTEMPTS` allows (counted retries, or crashes mid-send).
    public static let maxAttempts = DeliveryReason(rawValue: "max_attempts")
    /// `failed`: retries that spent no attempt went past `PUSHIZO_MAX_UNCOUNTED_RETRIES`.
    public static let retriesExhausted = DeliveryReason(rawValue: "retries_exhausted")
    /// `failed`: a producer- or subscriber-written column of the delivery's rows (e.g. `subscriptions.token`)
    /// is longer than the worker reads; `detail.columns` names them.
    public static let oversizedColumn = DeliveryReason(rawValue: "oversized_column")
    /// `skipped`: the notification was canceled, or its row deleted.
    public static let canceled = DeliveryReason(rawValue: "canceled")
    /// `skipped`: past `ttl` (or `ttl` 0 on a second attempt, or quiet hours end after the expiry).
    public static let expired = DeliveryReason(rawValue: "expired")
    /// `skipped`: the subscription is not `active`.
    public static let subscriptionInactive = DeliveryReason(rawValue: "subscription_inactive")
    /// `failed`: `subscriptions.platform` is not `ios`, `android` or `web`.
    public static let unknownPlatform = DeliveryReason(rawValue: "unknown_platform")
    /// `skipped`: the app has no channel for the platform's provider.
    public static let noChannel = DeliveryReason(rawValue: "no_channel")
    /// `skipped`: the message has nothing this provider can show (a badge- or sound-only push, which only
    /// APNs carries, to an Android or web subscription).
    public static let nothingToShow = DeliveryReason(rawValue: "nothing_to_show")
    /// `failed`: the message's `apns_push_type` cannot go this way: the subscription's provider is FCM or Web
    /// Push, which have no APNs push type (e.g. a `voip` subscription whose platform is not `ios`), or the app's
    /// APNs channel authenticates in a way Apple refuses for that type (`liveactivity`, `location` and
    /// `widgets` need a provider token; `mdm` needs an MDM push certificate).
    public static let pushTypeUnsupported = DeliveryReason(rawValue: "push_type_unsupported")
    /// `deferred`: quiet hours.
    public static let quietHours = DeliveryReason(rawValue: "quiet_hours")
    /// `deferred`: the message's `delivery_time_of_day` has not come yet in the subscriber's zone.
    public static let localTime = DeliveryReason(rawValue: "local_time")
    /// `retrying` (no attempt spent): the app's channel is paused.
    public static let channelPaused = DeliveryReason(rawValue: "channel_paused")
    /// `skipped`: a frequency cap rule is full for the user.
    public static let frequencyCapped = DeliveryReason(rawValue: "frequency_capped")
    /// `retrying` (no attempt spent): the frequency-cap reservation could not be made.
    public static let capUnavailable = DeliveryReason(rawValue: "cap_unavailable")
    /// `retrying` (no attempt spent, no event): the claim's lease had less than the per-delivery deadline left.
    public static let leaseExpiring = DeliveryReason(rawValue: "lease_expiring")
    /// `retrying` (no attempt spent): the message could not be read from the database.
    public static let messageUnavailable = DeliveryReason(rawValue: "message_unavailable")
    /// `retrying` (no attempt spent): the provider could not be reached (the request never left).
    public static let providerUnreachable = DeliveryReason(rawValue: "provider_unreachable")
    /// `retrying` (no attempt spent, no event, not counted against the retries allowed): the request waited 2 s for
    /// a stream (every stream of the push service in use, or its connection not open) and was withdrawn unsent; the
    /// worker, not the delivery, was short of streams there. It comes back after the outage backoff (a tenth of
    /// the message's age).
    public static let originBusy = DeliveryReason(rawValue: "origin_busy")
    /// `retrying` (no attempt spent, no event, not counted against the retries allowed): the FCM project's
    /// fleet-wide bucket (migration 0034; Firebase "Throttling and quotas": a per-project quota of messages per
    /// minute) had no permit left for it in this batch; it comes back when the bucket's refill reaches it.
    public static let fcmProjectQuota = DeliveryReason(rawValue: "fcm_project_quota")
    /// `retrying`: the whole provider exchange took longer than the per-delivery deadline. Also Google's
    /// canonical status `DEADLINE_EXCEEDED`, lower-cased, which FCM may answer with.
    public static let deadlineExceeded = DeliveryReason(rawValue: "deadline_exceeded")
    /// `failed`: no sender serves the platform's provider.
    public static let providerNotSupported = DeliveryReason(rawValue: "provider_not_supported")
    /// `failed`: the message does not validate (the detail names the field).
    public static let invalidMessage = DeliveryReason(rawValue: "invalid_message")
    /// `failed`: the message or the request built from it is too large (also APNs 413 `PayloadTooLarge` and
    /// Web Push 413, RFC 8030 §7.2).
    public static let payloadTooLarge = DeliveryReason(rawValue: "payload_too_large")
}

// MARK: - The queue's set-aside rows (ClaimStore.setAside)

extension DeliveryReason {
    /// `failed`: the claim statement failed on this row with SQLSTATE class 22 (PostgreSQL, Appendix A
    /// "PostgreSQL Error Codes": data exception); the row is set aside.
    public static let dataException = DeliveryReason(rawValue: "data_exception")
    /// `failed`: as ``dataException`` for SQLSTATE class 23 (integrity constraint violation).
    public static let integrityConstraintViolation = DeliveryReason(rawValue: "integrity_constraint_violation")
    /// `failed`: a claimed row has a column the worker could not decode.
    public static let unreadableRow = DeliveryReason(rawValue: "unreadable_row")
}

// MARK: - The senders and the HTTP/2 transport (before or around the request)

extension DeliveryReason {
    /// `channelError`: the channel's settings do not parse (a PEM that is not a key, a subject that is not a URI).
    public static let invalidChannelSettings = DeliveryReason(rawValue: "invalid_channel_settings")
    /// `failed`: a header HTTP/2 cannot carry.
    public static let invalidRequest = DeliveryReason(rawValue: "invalid_request")
    /// `failed`: a Web Push endpoint whose host is not a public internet address (docs/egress.md).
    public static let forbiddenEndpoint = DeliveryReason(rawValue: "forbidden_endpoint")
    /// `retrying`: the exchange failed on the way (reset stream, closed connection).
    public static let transportError = DeliveryReason(rawValue: "transport_error")
    /// `retrying` (counted): the answer went beyond the HTTP/2 client's read bounds.
    public static let responseTooLarge = DeliveryReason(rawValue: "response_too_large")
    /// `channelError`: the APNs provider token (an ES256 JWT) could not be made from the channel's key.
    public static let providerTokenFailed = DeliveryReason(rawValue: "provider_token_failed")
    /// `channelError`: the OAuth 2.0 token endpoint refused the FCM service account, or could not be reached.
    public static let accessTokenFailed = DeliveryReason(rawValue: "access_token_failed")
    /// `failed`: `web_p256dh` / `web_auth` are not an RFC 8291 key pair and secret.
    public static let invalidSubscriptionKeys = DeliveryReason(rawValue: "invalid_subscription_keys")
    /// `failed`: the subscription's token is not a device token of the provider's form.
    public static let badDeviceTokenFormat = DeliveryReason(rawValue: "bad_device_token_format")
    /// `channelError`: the APNs channel has a topic (bundle ID) that cannot be a header value.
    public static let invalidTopic = DeliveryReason(rawValue: "invalid_topic")
    /// `channelError`: the FCM channel has no `project_id`.
    public static let missingProjectID = DeliveryReason(rawValue: "missing_project_id")
    /// `channelError`: the FCM channel's `project_id` cannot be a URL path segment.
    public static let invalidProjectID = DeliveryReason(rawValue: "invalid_project_id")
    /// `channelError`: the FCM access token cannot be a header value.
    public static let invalidAccessToken = DeliveryReason(rawValue: "invalid_access_token")
    /// `failed`: the Web Push endpoint is not an `https` URL the worker can send to.
    public static let invalidEndpoint = DeliveryReason(rawValue: "invalid_endpoint")
    /// `failed`: the RFC 8291 encryption of the payload failed.
    public static let encryptionFailed = DeliveryReason(rawValue: "encryption_failed")
    /// `channelError`: the RFC 8292 VAPID token could not be signed with the channel's key.
    public static let vapidFailed = DeliveryReason(rawValue: "vapid_failed")
    /// `skipped`: a silent (`content_available`) push to a Web Push subscription, which has no silent push.
    public static let silentPushUnsupported = DeliveryReason(rawValue: "silent_push_unsupported")
    /// `channelError`: the APNs client certificate is past its `notAfter` (docs/apns-certificates.md).
    public static let certificateExpired = DeliveryReason(rawValue: "certificate_expired")
    /// `channelError`: the APNs client certificate does not cover the topic.
    public static let topicNotInCertificate = DeliveryReason(rawValue: "topic_not_in_certificate")
}

// MARK: - APNs (Apple, "Handling notification responses from APNs"), snake-cased

extension DeliveryReason {
    public static let badCollapseID = DeliveryReason(rawValue: "bad_collapse_id")
    /// 400 `BadDeviceToken`: invalidates when the request went to the environment the subscription recorded.
    public static let badDeviceToken = DeliveryReason(rawValue: "bad_device_token")
    public static let badExpirationDate = DeliveryReason(rawValue: "bad_expiration_date")
    public static let badMessageID = DeliveryReason(rawValue: "bad_message_id")
    public static let badPriority = DeliveryReason(rawValue: "bad_priority")
    public static let badTopic = DeliveryReason(rawValue: "bad_topic")
    public static let deviceTokenNotForTopic = DeliveryReason(rawValue: "device_token_not_for_topic")
    public static let duplicateHeaders = DeliveryReason(rawValue: "duplicate_headers")
    public static let idleTimeout = DeliveryReason(rawValue: "idle_timeout")
    public static let invalidPushType = DeliveryReason(rawValue: "invalid_push_type")
    public static let missingDeviceToken = DeliveryReason(rawValue: "missing_device_token")
    /// 400 `MissingTopic`; also the worker's own check before sending (the channel has no topic).
    public static let missingTopic = DeliveryReason(rawValue: "missing_topic")
    public static let payloadEmpty = DeliveryReason(rawValue: "payload_empty")
    public static let topicDisallowed = DeliveryReason(rawValue: "topic_disallowed")
    public static let badCertificate = DeliveryReason(rawValue: "bad_certificate")
    /// 403 `BadCertificateEnvironment`; also the worker's own check of a certificate channel before sending.
    public static let badCertificateEnvironment = DeliveryReason(rawValue: "bad_certificate_environment")
    public static let expiredProviderToken = DeliveryReason(rawValue: "expired_provider_token")
    /// 403 `Forbidden`, and any 403 without a reason.
    public static let forbidden = DeliveryReason(rawValue: "forbidden")
    /// 403 `InvalidProviderToken`; also the worker's own check that the token can be a header value.
    public static let invalidProviderToken = DeliveryReason(rawValue: "invalid_provider_token")
    public static let missingProviderToken = DeliveryReason(rawValue: "missing_provider_token")
    public static let unrelatedKeyIDInToken = DeliveryReason(rawValue: "unrelated_key_id_in_token")
    public static let badEnvironmentKeyIDInToken = DeliveryReason(rawValue: "bad_environment_key_id_in_token")
    public static let badPath = DeliveryReason(rawValue: "bad_path")
    public static let methodNotAllowed = DeliveryReason(rawValue: "method_not_allowed")
    public static let expiredToken = DeliveryReason(rawValue: "expired_token")
    /// APNs 410 `Unregistered` (and any 410 without a reason), FCM `UNREGISTERED`, Web Push 404 / 410 (RFC 8030
    /// §7.3): the token or endpoint is gone; invalidates the subscription.
    public static let unregistered = DeliveryReason(rawValue: "unregistered")
    public static let tooManyProviderTokenUpdates = DeliveryReason(rawValue: "too_many_provider_token_updates")
    public static let tooManyRequests = DeliveryReason(rawValue: "too_many_requests")
    public static let internalServerError = DeliveryReason(rawValue: "internal_server_error")
    public static let serviceUnavailable = DeliveryReason(rawValue: "service_unavailable")
    public static let shutdown = DeliveryReason(rawValue: "shutdown")
}

// MARK: - FCM (Firebase, `google.firebase.fcm.v1.FcmError.ErrorCode`), lower-cased

extension DeliveryReason {
    public static let invalidArgument = DeliveryReason(rawValue: "invalid_argument")
    /// `INVALID_ARGUMENT` naming the registration token itself: invalidates the subscription.
    public static let invalidRegistrationToken = DeliveryReason(rawValue: "invalid_registration_token")
    public static let senderIDMismatch = DeliveryReason(rawValue: "sender_id_mismatch")
    public static let quotaExceeded = DeliveryReason(rawValue: "quota_exceeded")
    public static let unavailable = DeliveryReason(rawValue: "unavailable")
    public static let `internal` = DeliveryReason(rawValue: "internal")
    /// `THIRD_PARTY_AUTH_ERROR` (and its older name `APNS_AUTH_ERROR`): the subscription is held
    /// (``CredentialHolds``), the channel goes on.
    public static let thirdPartyAuthError = DeliveryReason(rawValue: "third_party_auth_error")
    public static let unspecifiedError = DeliveryReason(rawValue: "unspecified_error")
    /// A 404 without `UNREGISTERED`: the channel's `project_id` is unknown.
    public static let notFound = DeliveryReason(rawValue: "not_found")
    public static let permissionDenied = DeliveryReason(rawValue: "permission_denied")
    public static let unauthenticated = DeliveryReason(rawValue: "unauthenticated")
    /// Google's canonical status `RESOURCE_EXHAUSTED`, which FCM may answer with.
    public static let resourceExhausted = DeliveryReason(rawValue: "resource_exhausted")
}

// MARK: - Huawei Push Kit (Huawei, "Sending Messages" and its result codes)

extension DeliveryReason {
    /// `failed` before sending: the `huawei` channel has no `app_id` (pauses the channel).
    public static let missingAppID = DeliveryReason(rawValue: "missing_app_id")
    /// `failed` before sending: the `huawei` channel's `app_id` is not 1 to 64 ASCII digits (pauses the channel).
    public static let invalidAppID = DeliveryReason(rawValue: "invalid_app_id")
    /// `80300007` "Token invalid error": the token is malformed or of another app; invalidates once the channel
    /// is proven by accepted sends.
    public static let invalidToken = DeliveryReason(rawValue: "invalid_token")
    /// `80100000` for the one token of a request ("failed to be sent to some tokens"); invalidates as
    /// ``invalidToken`` does.
    public static let illegalToken = DeliveryReason(rawValue: "illegal_token")
    /// `80200001` "Oauth authentication error": the access token is not the App ID's (pauses the channel).
    public static let oauthAuthenticationError = DeliveryReason(rawValue: "oauth_authentication_error")
    /// `80200003` "Oauth Token expired", refused again after a fresh access token (pauses the channel).
    public static let oauthTokenExpired = DeliveryReason(rawValue: "oauth_token_expired")

    /// `huawei_<code>`: a Push Kit result code with no reason of its own (`huawei_80100003`).
    public static func huawei(code: String) -> DeliveryReason {
        DeliveryReason(rawValue: "huawei_\(code)")
    }
}

// MARK: - Web Push (RFC 8030 §5, §7, §8.4; RFC 8292 §4.2)

extension DeliveryReason {
    public static let badRequest = DeliveryReason(rawValue: "bad_request")
    public static let unsupportedMediaType = DeliveryReason(rawValue: "unsupported_media_type")
    public static let vapidUnauthorized = DeliveryReason(rawValue: "vapid_unauthorized")
    public static let vapidForbidden = DeliveryReason(rawValue: "vapid_forbidden")
    public static let requestTimeout = DeliveryReason(rawValue: "request_timeout")
    /// 429, and WNS's 406 (Microsoft's throttle).
    public static let rateLimited = DeliveryReason(rawValue: "rate_limited")
}

// MARK: - Live Activity broadcast channels (Apple, "Sending broadcast push notification requests to APNs" and
// "Sending channel management requests to APNs"; docs/live-activity-channels.md)

extension DeliveryReason {
    /// The notification names a channel its app has no `live_activity_channels` row for: that notification fails.
    public static let unknownChannel = DeliveryReason(rawValue: "unknown_channel")
    /// The channel's row says it was deleted at APNs: a send to it fails, the app and its APNs channel go on.
    public static let channelDeleted = DeliveryReason(rawValue: "channel_deleted")
    /// The channel's creation at APNs failed (its row holds Apple's reason): sends to it fail.
    public static let channelFailed = DeliveryReason(rawValue: "channel_failed")
    /// The channel's row has no Apple channel id yet: the send waits for the reconciliation (`retry`).
    public static let channelNotReady = DeliveryReason(rawValue: "channel_not_ready")
    /// 404 `ChannelNotRegistered`: APNs knows no such channel (a broadcast fails; a delete counts it as done).
    public static let channelNotRegistered = DeliveryReason(rawValue: "channel_not_registered")
    /// 400 `BadChannelId`, also the worker's own check that the id is a clean header value.
    public static let badChannelID = DeliveryReason(rawValue: "bad_channel_id")
}

extension DeliveryReason {
    /// Every static member above, in declaration order: the reasons the worker and the providers document
    /// (metric labels take only these, ``http(status:)`` aside; a test holds the list to the docs).
    public static let documented: [DeliveryReason] = [
        .maxAttempts, .retriesExhausted, .oversizedColumn, .canceled, .expired, .subscriptionInactive,
        .unknownPlatform, .noChannel, .nothingToShow, .pushTypeUnsupported, .quietHours, .localTime, .channelPaused,
        .frequencyCapped, .capUnavailable, .leaseExpiring, .messageUnavailable, .providerUnreachable, .originBusy,
        .fcmProjectQuota,
        .unknownChannel, .channelDeleted, .channelFailed, .channelNotReady, .channelNotRegistered, .badChannelID,
        .deadlineExceeded, .providerNotSupported, .invalidMessage, .payloadTooLarge,
        .dataException, .integrityConstraintViolation, .unreadableRow,
        .invalidChannelSettings, .invalidRequest, .forbiddenEndpoint, .transportError, .responseTooLarge,
        .providerTokenFailed, .accessTokenFailed, .invalidSubscriptionKeys, .badDeviceTokenFormat, .invalidTopic,
        .missingProjectID, .invalidProjectID, .invalidAccessToken, .invalidEndpoint, .encryptionFailed, .vapidFailed,
        .silentPushUnsupported, .certificateExpired, .topicNotInCertificate,
        .badCollapseID, .badDeviceToken, .badExpirationDate, .badMessageID, .badPriority, .badTopic,
        .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken, .missingTopic,
        .payloadEmpty, .topicDisallowed, .badCertificate, .badCertificateEnvironment, .expiredProviderToken, .forbidden,
        .invalidProviderToken, .missingProviderToken, .unrelatedKeyIDInToken, .badEnvironmentKeyIDInToken, .badPath,
        .methodNotAllowed, .expiredToken, .unregistered, .tooManyProviderTokenUpdates, .tooManyRequests,
        .internalServerError, .serviceUnavailable, .shutdown,
        .invalidArgument, .invalidRegistrationToken, .senderIDMismatch, .quotaExceeded, .unavailable, .internal,
        .thirdPartyAuthError, .unspecifiedError, .notFound, .permissionDenied, .unauthenticated, .resourceExhausted,
        .missingAppID, .invalidAppID, .invalidToken, .illegalToken, .oauthAuthenticationError, .oauthTokenExpired,
        .badRequest, .unsupportedMediaType, .vapidUnauthorized, .vapidForbidden, .requestTimeout, .rateLimited,
    ]
}

extension DeliveryReason {
    /// The reason a person named (`retry --reason`): a ``documented`` reason or `http_<status>`, its text
    /// compared without regard to case or underscores, so a provider's own spelling names the stored one
    /// (APNs's `BadDeviceToken` is `bad_device_token`, FCM's `UNAVAILABLE` is `unavailable`); nil for any other
    /// text.
    public init?(named text: String) {
        func key(_ text: String) -> String { String(text.lowercased().filter { $0 != "_" }) }
        let wanted = key(text)
        if let reason = Self.documented.first(where: { key($0.rawValue) == wanted }) {
            self = reason
            return
        }
        let lowered = text.lowercased()
        guard lowered.hasPrefix("http_"), let status = Int(lowered.dropFirst(5)), (100...599).contains(status),
            lowered.count == 8
        else { return nil }
        self = .http(status: status)
    }
}
