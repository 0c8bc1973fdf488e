import Foundation

/// What one claimed delivery is, as far as the decision needs it: the claim's columns, decoded, plus the
/// worker's limits. Built by the worker from its claim and by `preview` from its document, so both decide
/// from the same facts.
public struct DeliveryFacts: Sendable {
    /// 1 for the first claim; every claim counts one.
    public var attempt: Int
    /// `PUSHIZO_MAX_ATTEMPTS`: a claim past it was abandoned that often (crashes) and fails `max_attempts`.
    public var maxAttempts: Int
    /// `notifications.status == 'canceled'`.
    public var notificationCanceled: Bool
    /// `coalesce(send_after, created_at)`: the instant `ttl` counts from.
    public var notificationStart: Date
    public var subscriptionID: UUID
    /// What frequency caps count against: the user, else the subscription (goes to `detail.cap_key`).
    public var capKey: UUID
    /// `subscriptions.status` (only `active` is sent to).
    public var subscriptionStatus: String
    public var platform: Platform
    /// The app has a channel for the platform's provider.
    public var hasChannel: Bool
    public var channelPausedUntil: Date?
    /// `apps.quiet_hours_start` / `quiet_hours_end` as PostgreSQL prints `time`; both `nil` = off.
    public var quietHoursStart: String?
    public var quietHoursEnd: String?
    /// `subscriptions.timezone` and `apps.default_timezone` (IANA names).
    public var timezone: String?
    public var defaultTimezone: String?
    /// Seconds over which deliveries held by quiet hours are released after the window (docs/quiet-hours.md).
    public var quietHoursSpread: Int = 0
    /// The app's caps, `nil` or empty for none.
    public var frequencyCaps: FrequencyCaps?
    /// Providers a sender exists for; a delivery whose provider has none fails `provider_not_supported`.
    public var providersWithSender: Set<Provider> = Set(Provider.allCases)
    /// How long one provider exchange may take (the per-delivery deadline); `nil`: none.
    public var deliveryTimeout: Duration?
    /// What is left of this worker's claim of the delivery; `nil`: no lease guard (tests, `preview`).
    public var leaseRemaining: Duration?
    /// Columns of the delivery's rows too long to be read (e.g. `subscriptions.token`): the delivery fails
    /// `oversized_column` before anything else is looked at.
    public var oversizedColumns: [String] = []
    /// `deliveries.local_due_at`: when expansion scheduled this delivery by the message's
    /// `delivery_time_of_day` (computed in PostgreSQL, the queue's authority; docs/local-time-delivery.md).
    /// `nil`: not scheduled by local time (no such field, or a delivery made before migration 0011).
    public var localTimeDueAt: Date?
    /// `true` (for `preview`): when `localTimeDueAt` is `nil` and the message has a `delivery_time_of_day`,
    /// compute the due instant with ``LocalTimeDelivery`` from `notificationStart` and the zones.
    public var computesLocalTimeDue = false

    public init(
        attempt: Int, maxAttempts: Int, notificationCanceled: Bool, notificationStart: Date, subscriptionID: UUID,
        capKey: UUID, subscriptionStatus: String, platform: Platform, hasChannel: Bool, channelPausedUntil: Date?,
        quietHoursStart: String?, quietHoursEnd: String?, timezone: String?, defaultTimezone: String?
    ) {
        self.attempt = attempt
        self.maxAttempts = maxAttempts
        self.notificationCanceled = notificationCanceled
        self.notificationStart = notificationStart
        self.subscriptionID = subscriptionID
        self.capKey = capKey
        self.subscriptionStatus = subscriptionStatus
        self.platform = platform
        self.hasChannel = hasChannel
        self.channelPausedUntil = channelPausedUntil
        self.quietHoursStart = quietHoursStart
        self.quietHoursEnd = quietHoursEnd
        self.timezone = timezone
        self.defaultTimezone = defaultTimezone
    }
}

/// What the owner of a delivery does next (see ``DeliveryDecision``).
public enum DeliveryStep: Sendable, Equatable {
    /// Read and parse the notification's message, then call ``DeliveryDecision/messageLoaded(_:)`` or
    /// ``DeliveryDecision/messageUnusable(_:)``.
    case loadMessage
    /// Reserve the notification against the user's frequency caps (the worker, in PostgreSQL; `preview`
    /// reports the step), then call ``DeliveryDecision/frequencyCapAnswered(_:)``.
    case reserveFrequencyCap(FrequencyCaps, provider: Provider)
    /// Build the request and send it through `provider`; the sender's answer is the outcome.
    case send(Provider)
    /// Done without a send: record `outcome` (a `deferred` outcome or a `retry` is "defer until T").
    /// `provider` when the platform maps to one.
    case complete(DeliveryOutcome, provider: Provider?)
}

/// The frequency-cap reservation's answer.
public enum FrequencyCapAnswer: Sendable, Equatable {
    /// Room in every rule: send.
    case granted
    /// `rule` already has `used` (>= its `max`) grants in its window.
    case denied(rule: FrequencyCapRule, used: Int)
    /// The reservation could not be made (`error` says why): not a denial, try later.
    case unavailable(error: String)
}

/// The one decision path of a delivery, without I/O: the worker's pipeline and `preview` both drive it, so
/// they cannot disagree. The owner asks ``next()`` what to do, carries out the I/O steps (load the message,
/// reserve a cap, send) and feeds the answers back, until a ``DeliveryStep/send(_:)`` or
/// ``DeliveryStep/complete(_:provider:)``.
///
/// The checks, in their fixed order (docs/delivery.md): abandoned (`max_attempts`) -> canceled -> message
/// usable -> expired -> subscription active -> known platform -> channel present -> something to show on
/// this provider -> quiet hours (not for exempt or silent pushes) -> channel not paused -> a sender exists ->
/// lease long enough -> frequency caps (not for exempt or silent pushes; last, as it counts) -> send.
public struct DeliveryDecision: Sendable {
    /// Apple's and Google's default storage time when a message gives no `ttl`: 4 weeks, in seconds.
    public static let defaultTTL: Int64 = 2_419_200

    public private(set) var facts: DeliveryFacts
    public let now: Date
    /// The parsed message once loaded.
    public private(set) var message: NotificationMessage?
    /// Time zone names met by the quiet-hours check that did not resolve (the fallback applied), each once.
    public private(set) var unknownZones: [String] = []
    private var messageProblem: DeliveryOutcome?
    /// The checks between a loaded message and the send, made once when the message arrives.
    private var checked: DeliveryStep?
    private var capAnswer: FrequencyCapAnswer?

    public init(_ facts: DeliveryFacts, now: Date) {
        self.facts = facts
        self.now = now
    }

    /// The message arrived and parsed.
    public mutating func messageLoaded(_ message: NotificationMessage) {
        self.message = message
        checked = check(message)
    }

    /// The message cannot be used: `outcome` (invalid, too large, gone, or unavailable) completes the delivery.
    public mutating func messageUnusable(_ outcome: DeliveryOutcome) {
        messageProblem = outcome
    }

    /// What is left of the claim now: the owner refreshes it before each ``next()``, since loading the
    /// message takes time and the lease guard must see what is left at the send, not at the claim.
    public mutating func leaseRemaining(_ remaining: Duration?) {
        facts.leaseRemaining = remaining
    }

    /// The answer to ``DeliveryStep/reserveFrequencyCap(_:provider:)``.
    public mutating func frequencyCapAnswered(_ answer: FrequencyCapAnswer) {
        capAnswer = answer
    }

    /// What to do next; the same answer until an input changes.
    public func next() -> DeliveryStep {
        // Claimed more often than attempts allow, yet never completed: a worker died on it each time (a crash
        // or a kill). Stop here so one poisonous row cannot take the fleet down forever.
        if facts.attempt > facts.maxAttempts {
            return .complete(
                .failed(reason: .maxAttempts, detail: ["abandoned_claims": .int(Int64(facts.attempt))]),
                provider: nil)
        }
        if !facts.oversizedColumns.isEmpty {
            return .complete(
                .failed(reason: .oversizedColumn,
                        detail: ["columns": .array(facts.oversizedColumns.map { .string($0) })]),
                provider: nil)
        }
        if facts.notificationCanceled {
            return .complete(.skipped(reason: .canceled), provider: nil)
        }
        if let messageProblem { return .complete(messageProblem, provider: nil) }
        guard let message, let checked else { return .loadMessage }
        guard case .send(let provider) = checked else { return checked }
        guard facts.providersWithSender.contains(provider) else {
            return .complete(
                .failed(reason: .providerNotSupported, detail: ["provider": .string(provider.rawValue)]),
                provider: provider)
        }
        // No send on a lease about to run out: another worker could claim the delivery mid-send. Before the
        // frequency caps, so a delivery put back uses no grant.
        if let timeout = facts.deliveryTimeout, let remaining = facts.leaseRemaining, remaining < timeout {
            return .complete(.retry(reason: .leaseExpiring), provider: provider)
        }
        // Last, as it counts: a delivery stopped by anything else uses no grant. Exempt messages and silent
        // pushes neither check nor count.
        if let caps = facts.frequencyCaps, !caps.isEmpty, !message.frequencyCapExempt, !message.isSilent {
            switch capAnswer {
            case nil:
                return .reserveFrequencyCap(caps, provider: provider)
            case .granted:
                break
            case .denied(let rule, let used):
                return .complete(
                    .skipped(
                        reason: .frequencyCapped,
                        detail: [
                            "max": .int(Int64(rule.max)), "per_seconds": .int(Int64(rule.perSeconds)),
                            "used": .int(Int64(used)), "cap_key": .string(facts.capKey.uuidString.lowercased()),
                        ]),
                    provider: provider)
            case .unavailable(let error):
                // Not knowing is not a denial: try again later, without counting an attempt.
                return .complete(
                    .retry(reason: .capUnavailable, detail: ["error": .string(error)]), provider: provider)
            }
        }
        return .send(provider)
    }

    /// The checks that need the message and no I/O: `.send(provider)` or `.complete`.
    private mutating func check(_ message: NotificationMessage) -> DeliveryStep {
        let ttl = message.ttl.map(Int64.init) ?? Self.defaultTTL
        let expiresAt = facts.notificationStart.addingTimeInterval(Double(ttl))
        // ttl 0 means "now or never" (APNs `apns-expiration: 0`, FCM `ttl: 0s`): one attempt, however late
        // it is claimed, and no retry.
        if ttl == 0 ? facts.attempt > 1 : expiresAt < now {
            return .complete(
                .skipped(reason: .expired, detail: ["expired_at": .string(expiresAt.formatted(.iso8601))]),
                provider: nil)
        }
        if facts.subscriptionStatus != "active" {
            return .complete(
                .skipped(reason: .subscriptionInactive, detail: ["status": .string(facts.subscriptionStatus)]),
                provider: nil)
        }
        guard let provider = facts.platform.provider else {
            return .complete(
                .failed(reason: .unknownPlatform, detail: ["platform": .string(facts.platform.text)]),
                provider: nil)
        }
        guard facts.hasChannel else {
            return .complete(
                .skipped(reason: .noChannel, detail: ["provider": .string(provider.rawValue)]),
                provider: provider)
        }
        if provider != .apns, let pushType = message.apnsPushType {
            // FCM and Web Push have none of APNs's push types; the data is wrong (such a token is an iOS
            // one), so this is a failure, not a skip.
            return .complete(
                .failed(
                    reason: .pushTypeUnsupported,
                    detail: [
                        "provider": .string(provider.rawValue), "apns_push_type": .string(pushType.rawValue),
                        "note": .string("APNs push types exist on APNs only: a \(pushType.subscriptionKind) subscription must be an ios one"),
                    ]),
                provider: provider)
        }
        if provider != .apns, !message.isSilent, !message.hasVisibleText {
            // A badge or a sound alone is an APNs notion; Android and web subscriptions would get an empty
            // notification. Before quiet hours: holding what will be skipped anyway helps no one.
            return .complete(
                .skipped(
                    reason: .nothingToShow,
                    detail: ["provider": .string(provider.rawValue), "note": "no contents or headings: a badge or sound alone is shown by APNs only"]),
                provider: provider)
        }
        if let step = localTime(message, expiresAt: expiresAt, provider: provider) { return step }
        // Silent pushes show nothing and make no sound (Apple, "Pushing background updates to your App"):
        // quiet hours hold only what the user would see or hear.
        if !message.quietHoursExempt, !message.isSilent,
            let window = try? QuietHoursWindow(start: facts.quietHoursStart, end: facts.quietHoursEnd)
        {
            let decision = QuietHours.decide(
                window: window, subscriberZone: facts.timezone, appDefaultZone: facts.defaultTimezone, at: now,
                spreadSeconds: facts.quietHoursSpread, spreadKey: facts.subscriptionID)
            for zone in decision.unknownZones where !unknownZones.contains(zone) { unknownZones.append(zone) }
            if let until = decision.deferUntil {
                // It would expire before the window ends (ttl 0 cannot wait at all): skip it now.
                if ttl == 0 || decision.expiresBeforeRelease(expiresAt) {
                    return .complete(
                        .skipped(
                            reason: .expired,
                            detail: [
                                "expired_at": .string(expiresAt.formatted(.iso8601)),
                                "quiet_hours_until": .string(until.formatted(.iso8601)),
                            ]),
                        provider: provider)
                }
                return .complete(
                    .deferred(
                        until: until,
                        detail: ["zone": .string(decision.zone), "window": .string("\(window.start)-\(window.end)")]),
                    provider: provider)
            }
        }
        if let pausedUntil = facts.channelPausedUntil, pausedUntil > now {
            return .complete(
                .retry(reason: .channelPaused, detail: ["provider": .string(provider.rawValue)], notBefore: pausedUntil),
                provider: provider)
        }
        return .send(provider)
    }

    /// Local-time delivery (docs/local-time-delivery.md), before quiet hours so that a local time inside the
    /// window is then deferred by it: skipped as `expired` when the notification expires before its local
    /// time (expansion makes such a delivery due at once, so the skip is prompt), deferred with reason
    /// `local_time` while the local time is still ahead (`preview`; the queue's `run_at` already waits for it).
    /// Applies to silent pushes too: it is the producer's schedule, not a courtesy to the user.
    private mutating func localTime(_ message: NotificationMessage, expiresAt: Date, provider: Provider) -> DeliveryStep? {
        guard let timeOfDay = message.deliveryTimeOfDay else { return nil }
        var due = facts.localTimeDueAt
        // The queue's instant was already waited for by the claim (database clock): allow for clock skew.
        var tolerance = LocalTimeDelivery.claimClockTolerance
        let zone: String
        if due == nil, facts.computesLocalTimeDue {
            tolerance = 0
            let computed = LocalTimeDelivery.due(
                timeOfDay: timeOfDay, subscriberZone: facts.timezone, appDefaultZone: facts.defaultTimezone,
                start: facts.notificationStart)
            for name in computed.unknownZones where !unknownZones.contains(name) { unknownZones.append(name) }
            due = computed.dueAt
            zone = computed.zone
        } else {
            // The zone's name for the event detail only: the due instant itself came from the database.
            zone = QuietHours.resolveZone(subscriberZone: facts.timezone, appDefaultZone: facts.defaultTimezone).zone
        }
        guard let due else { return nil }
        let time = String(timeOfDay.description.prefix(5))
        if expiresAt < due {
            return .complete(
                .skipped(
                    reason: .expired,
                    detail: [
                        "expired_at": .string(expiresAt.formatted(.iso8601)),
                        "local_time_due": .string(due.formatted(.iso8601)),
                        "zone": .string(zone), "delivery_time_of_day": .string(time),
                    ]),
                provider: provider)
        }
        if due.timeIntervalSince(now) > tolerance {
            return .complete(
                .deferred(
                    until: due, detail: ["zone": .string(zone), "delivery_time_of_day": .string(time)], reason: .localTime),
                provider: provider)
        }
        return nil
    }
}
