import DeliveryCore
import Foundation
import Providers
import UUIDText
import Synchronization

/// The per-delivery path: ``DeliveryDecision`` (the checks in their fixed order, shared with `preview`)
/// driven with the worker's I/O (message cache, frequency-cap reservation, provider senders), then the
/// completion.
public final class DeliveryPipeline: DeliveryProcessing {
    /// Apple's and Google's default storage time when a message gives no `ttl`: 4 weeks, in seconds.
    public static let defaultTTL: Int64 = DeliveryDecision.defaultTTL

    private let senders: [Provider: any ProviderSender]
    /// The providers of ``senders``, as the decision asks (built once, not per delivery).
    private let providersWithSender: Set<Provider>
    private let maxAttempts: Int
    private let maxUncountedRetries: Int
    /// How long one delivery's whole provider exchange may take; `nil`: no deadline (tests).
    private let deliveryTimeout: Duration?
    /// Enforces ``deliveryTimeout`` (`nil` when there is none).
    private let deadlines: DeliveryDeadlines?
    private let retryPolicy: RetryPolicy
    private let logger: Logger
    /// One line per app and cause per hour; channel pauses once per pause period.
    private let warnings = LogRateLimiter(interval: .seconds(3600))
    private let pauseWarnings = LogRateLimiter(interval: CompletionFactory.defaultChannelPause)
    /// Parsed messages; the claim fills it for each batch before the batch is handed here (``ClaimedBatchPrefetch``).
    let messages: MessageCache
    private let quietHoursSpread: Int
    /// Unknown time zone names: logged once a day per name, counted always.
    private let zoneWarnings = LogRateLimiter(interval: .seconds(86_400))
    private let unknownZoneCount = Atomic<Int>(0)
    private let reserveFrequencyCap: FrequencyCapReserver
    /// Parsed `apps.frequency_caps` by column text (apps have few distinct values).
    private let capsByText = Mutex<[String: FrequencyCaps?]>([:])
    /// A bad `apps.frequency_caps`: logged once a day per app and value.
    private let capsWarnings = LogRateLimiter(interval: .seconds(86_400))
    /// Outcomes, send durations and channel pauses are counted here (`nil`: not counted).
    private let metrics: WorkerMetrics?

    /// Reserves a notification for a cap key (see ``FrequencyCapStore/reserve(on:_:)``); throws when the
    /// database cannot answer.
    public typealias FrequencyCapReserver = @Sendable (FrequencyCapRequest) async throws -> FrequencyCapDecision

    /// How many deliveries met a time zone name that did not resolve (the fallback zone applied).
    public var unknownZoneFallbacks: Int { unknownZoneCount.load(ordering: .relaxed) }

    /// - Parameters:
    ///   - loadMessages: reads `notifications.message` for a set of notifications (see
    ///     ``MessageStore/messages(on:notificationIDs:maximumBytes:)``).
    ///   - reserveFrequencyCap: the frequency-cap reservation, run for a delivery that passed every other
    ///     check when its app has caps and its message is neither exempt nor silent.
    ///   - maxUncountedRetries: retries spending no attempt before `failed` / `retries_exhausted`.
    ///   - deliveryTimeout: how long the sender may take in all (token fetch, send, refresh, resend); past it
    ///     the send is cancelled and retried (`deadline_exceeded`, a counted attempt). A delivery whose
    ///     lease (``ClaimedDelivery/leaseExpiry``) has less than this left is put back in the queue unsent.
    ///   - metrics: where outcomes, send durations and channel pauses are counted.
    public init(
        senders: [any ProviderSender], maxAttempts: Int, retryPolicy: RetryPolicy, logger: Logger,
        quietHoursSpread: Int = 0, maxUncountedRetries: Int = .max, deliveryTimeout: Duration? = nil,
        loadMessages: @escaping MessageCache.Loader, reserveFrequencyCap: @escaping FrequencyCapReserver,
        metrics: WorkerMetrics? = nil
    ) {
        self.metrics = metrics
        self.maxUncountedRetries = maxUncountedRetries
        self.deliveryTimeout = deliveryTimeout
        self.deadlines = deliveryTimeout.map(DeliveryDeadlines.init(timeout:))
        self.reserveFrequencyCap = reserveFrequencyCap
        self.quietHoursSpread = quietHoursSpread
        self.senders = Dictionary(senders.map { ($0.provider, $0) }, uniquingKeysWith: { first, _ in first })
        self.providersWithSender = Set(self.senders.keys)
        self.maxAttempts = maxAttempts
        self.retryPolicy = retryPolicy
        self.logger = logger
        self.messages = MessageCache(load: loadMessages)
    }

    /// One delivery, judged at ``ClaimedDelivery/judgedNow(at:)`` (PostgreSQL's clock, docs/clocks.md); sent as a
    /// batch of one.
    public func process(_ delivery: ClaimedDelivery) async -> DeliveryCompletion {
        let now = delivery.judgedNow()
        switch await decideUntilSend(delivery, now: now) {
        case .complete(let outcome, let provider):
            return complete(delivery, outcome: outcome, provider: provider, now: now)
        case .send(let provider, let message):
            return complete(delivery, outcome: await sendAsBatchOfOne(delivery, message: message, provider: provider, now: now), provider: provider, now: now)
        }
    }

    /// One checked delivery sent as a batch of one.
    private func sendAsBatchOfOne(_ delivery: ClaimedDelivery, message: NotificationMessage, provider: Provider, now: Date) async -> DeliveryOutcome {
        let reported = Mutex<DeliveryOutcome?>(nil)
        await send([BatchedSend(delivery: delivery, message: message)], provider: provider, now: now) { _, outcome in
            reported.withLock { $0 = outcome }
        }
        // `send` reports every delivery it is given before it returns.
        return reported.withLock { $0 } ?? .deadlineExceeded(after: deliveryTimeout ?? .zero)
    }

    /// A claimed batch: each delivery's checks run here in turn, and the deliveries left to send go to their
    /// provider's sender together (one hand-off to the HTTP/2 client per origin, no task per delivery).
    /// Deliveries of apps with frequency caps go one task each from the start, so that their reservations (a
    /// database round trip each) run side by side rather than one after another; each is then sent as a batch
    /// of one through the same sender.
    /// Every delivery of the batch is judged at one instant on PostgreSQL's clock, carried forward from the claim
    /// (``ClaimedDelivery/judgedNow(at:)``, docs/clocks.md): expiry, local time, quiet hours, channel pauses and
    /// next attempts agree with the `run_at` and leases the database judged, whatever this host's clock says.
    public func process(batch: [ClaimedDelivery], completed: @escaping @Sendable (ClaimedDelivery, DeliveryCompletion) -> Void) async {
        let now = batch.first?.judgedNow() ?? Date()
        await withDiscardingTaskGroup { group in
            var batched: [Provider: [BatchedSend]] = [:]
            for delivery in batch {
                if let caps = frequencyCaps(of: delivery), !caps.isEmpty {
                    group.addTask { completed(delivery, await self.process(delivery)) }
                    continue
                }
                switch await decideUntilSend(delivery, now: now) {
                case .complete(let outcome, let provider):
                    completed(delivery, complete(delivery, outcome: outcome, provider: provider, now: now))
                case .send(let provider, let message):
                    batched[provider, default: []].append(BatchedSend(delivery: delivery, message: message))
                }
            }
            for (provider, sends) in batched {
                group.addTask { await self.send(sends, provider: provider, now: now, completed: completed) }
            }
        }
    }

    /// The fleet's shared tokens `batch`'s requests will carry, one per credential, in the batch's order, as
    /// the senders name them (``ProviderSender/sharedTokenKey(for:)``): the claim reads them beside the batch
    /// (``ClaimedBatchPrefetch``). Each app's channel is asked once per provider; deliveries without a channel
    /// or whose channel is paused at the batch's instant need none.
    func sharedTokenKeys(of batch: [ClaimedDelivery]) -> [ProviderTokenKey] {
        guard let now = batch.first?.judgedNow() else { return [] }
        var keys: [ProviderTokenKey] = []
        var asked: Set<AppChannel> = []
        // A batch's deliveries come mostly in runs of one app and platform: a comparison spares the set.
        var last: (app: UUID, platform: String)?
        for delivery in batch where delivery.channelProvider != nil {
            if let last, last.app == delivery.appID, last.platform == delivery.platform { continue }
            last = (delivery.appID, delivery.platform)
            guard let provider = Platform(delivery.platform).provider, let sender = senders[provider],
                asked.insert(AppChannel(app: delivery.appID, provider: provider)).inserted,
                delivery.channelPausedUntil.map({ $0 <= now }) ?? true,
                let key = sender.sharedTokenKey(for: delivery), !keys.contains(key)
            else { continue }
            keys.append(key)
        }
        return keys
    }

    /// An app's channel for one provider (`app_channels` is keyed so).
    private struct AppChannel: Hashable {
        var app: UUID
        var provider: Provider
    }

    /// Checked deliveries sent through their provider's sender, each completed exactly once.
    private func send(
        _ sends: [BatchedSend], provider: Provider, now: Date,
        completed: @escaping @Sendable (ClaimedDelivery, DeliveryCompletion) -> Void
    ) async {
        await send(sends, provider: provider, now: now) { index, outcome in
            let delivery = sends[index].delivery
            completed(delivery, self.complete(delivery, outcome: outcome, provider: provider, now: now))
        }
    }

    /// Checked deliveries sent through their provider's sender, each one's outcome reported exactly once:
    /// within the per-delivery deadline (the sender's exchanges end by it; a batch of one that does not is
    /// cancelled there), and what the sender left unreported ends as `deadline_exceeded`.
    private func send(
        _ sends: [BatchedSend], provider: Provider, now: Date, outcome: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async {
        guard let sender = senders[provider] else {
            for index in sends.indices {
                outcome(index, .failed(reason: .providerNotSupported, detail: ["provider": .string(provider.rawValue)]))
            }
            return
        }
        let started = ContinuousClock.now
        let context = SendBatchContext(
            now: now, deadline: deliveryTimeout.map { started + $0 }, timeout: deliveryTimeout ?? .zero)
        let reported = ReportedOnce(count: sends.count)
        let report: @Sendable (Int, DeliveryOutcome) -> Void = { index, sent in
            guard reported.take(index) else { return }
            self.metrics?.sendFinished(provider: provider, seconds: WorkerMetrics.seconds(since: started))
            // Reported from the sender's own task after the deadline cancelled it: whatever it says, the exchange
            // was cut off (the request may have reached the provider).
            if Task.isCancelled, let deadline = context.deadline, deadline <= .now {
                outcome(index, context.deadlineExceeded)
            } else {
                outcome(index, sent)
            }
        }
        // A sender ends every exchange by `context.deadline` itself (PlannedBatch cuts each request's timeout to
        // it). A batch of one (a delivery of an app with frequency caps) also runs in a task the deadline
        // cancels, as a sender that overran it would otherwise hold that delivery's slot; a task per larger batch
        // would cost measurably on steady one-device traffic, whose batches are small.
        if let deadlines, sends.count == 1 {
            _ = await deadlines.run {
                await sender.send(batch: sends, context: context, completed: report)
                return .sent(providerMessageID: nil)
            }
        } else {
            await sender.send(batch: sends, context: context, completed: report)
        }
        for index in reported.untaken() { report(index, context.deadlineExceeded) }
    }

    /// The completion of a decided delivery: the queue change and event (``CompletionFactory``), a frequency-cap
    /// grant given back when nothing reached the device, the log line and the counters.
    private func complete(_ delivery: ClaimedDelivery, outcome: DeliveryOutcome, provider: Provider?, now: Date) -> DeliveryCompletion {
        var completion = CompletionFactory.completion(
            for: delivery.completionFacts, outcome: outcome, provider: provider, maxAttempts: maxAttempts,
            maxUncountedRetries: maxUncountedRetries, retryPolicy: retryPolicy, now: now,
            unitRandom: Double.random(in: 0..<1))
        // A notification that reached no device of the key gives its grant back (docs/frequency-caps.md); the
        // completion transaction decides, under the key's lock, whether any device got it or still may.
        if completion.nextRunAt == nil, completion.event != .sent, completion.reason != .frequencyCapped,
            let caps = frequencyCaps(of: delivery), !caps.isEmpty
        {
            completion.capRelease = FrequencyCapRelease(
                appID: delivery.appID, capKey: delivery.capKey, notificationID: delivery.notificationID)
        }
        report(completion, of: delivery)
        if let metrics {
            // A delivery decided before a provider was chosen (a message that cannot be sent, a canceled
            // notification) still counts under its platform's provider; `none` is left for unknown platforms.
            metrics.delivered(
                provider: provider ?? Platform(delivery.platform).provider, event: completion.event, reason: completion.reason)
            if let pause = completion.channelPause { metrics.channelPaused(provider: pause.provider, reason: pause.reason) }
        }
        return completion
    }

    /// The app's caps, or `nil` when it has none or its column is malformed (then caps are off for the app,
    /// logged once a day: a bad setting must never stop deliveries).
    func frequencyCaps(of delivery: ClaimedDelivery) -> FrequencyCaps? {
        guard let text = delivery.frequencyCapsJSON, text != "[]" else { return nil }
        if let cached = capsByText.withLock({ $0[text] }) { return cached }
        let parsed: FrequencyCaps?
        do {
            parsed = try FrequencyCaps(jsonText: text)
        } catch {
            parsed = nil
            let app = delivery.appID.uuidString.lowercased()
            if capsWarnings.allow("\(app):\(text)") {
                logger.warning(
                    "apps.frequency_caps is malformed; frequency caps are off for this app until it is fixed",
                    ["app_id": app, "error": error.description])
            }
        }
        capsByText.withLock { cache in
            if cache.count >= 1024 { cache.removeAll() }
            cache[text] = .some(parsed)
        }
        return parsed
    }

    /// The frequency-cap step (docs/frequency-caps.md): the reservation in PostgreSQL, as the decision's answer.
    func reserveFrequencyCap(_ delivery: ClaimedDelivery, caps: FrequencyCaps) async -> FrequencyCapAnswer {
        let request = FrequencyCapRequest(
            appID: delivery.appID, capKey: delivery.capKey, notificationID: delivery.notificationID, caps: caps)
        do {
            switch try await reserveFrequencyCap(request) {
            case .granted: return .granted
            case .denied(let rule, let used): return .denied(rule: rule, used: used)
            }
        } catch {
            return .unavailable(error: "\(error)")
        }
    }

    /// Puts failures and retries in the log once per app, kind and hour (channel pauses once per pause), so
    /// an operator watching the journal sees a misconfigured app or an unreachable provider without reading
    /// `delivery_events`; every occurrence stays in `delivery_events`.
    private func report(_ completion: DeliveryCompletion, of delivery: ClaimedDelivery) {
        if completion.channelPause == nil, completion.event != .failed, completion.event != .retrying {
            return  // the common case (sent, skipped, deferred): nothing to log, nothing to format
        }
        let app = delivery.appID.uuidString.lowercased()
        if let pause = completion.channelPause {
            guard pauseWarnings.allow("\(app):\(pause.provider)") else { return }
            logger.warning(
                "channel paused",
                ["app_id": app, "provider": pause.provider.rawValue, "reason": pause.reason.rawValue, "until": pause.until.formatted(.iso8601)])
            return
        }
        guard completion.event == .failed || completion.event == .retrying, let reason = completion.reason else { return }
        if warnings.allow("\(app):\(completion.event):\(reason)") {
            logger.warning(
                "delivery \(completion.event); more of this kind for the app within the hour go to delivery_events only",
                ["app_id": app, "reason": reason.rawValue, "detail": completion.detailJSON])
        }
    }

    /// Drives ``DeliveryDecision`` for one delivery, carrying out its I/O steps (message, cap, send as a batch
    /// of one).
    func decide(_ delivery: ClaimedDelivery, now: Date) async -> (DeliveryOutcome, Provider?) {
        switch await decideUntilSend(delivery, now: now) {
        case .complete(let outcome, let provider): return (outcome, provider)
        case .send(let provider, let message):
            return (await sendAsBatchOfOne(delivery, message: message, provider: provider, now: now), provider)
        }
    }

    /// Where the checks of one delivery end: an outcome without a send, or the send to make.
    enum CheckedDelivery {
        case complete(DeliveryOutcome, provider: Provider?)
        case send(Provider, message: NotificationMessage)
    }

    /// Drives ``DeliveryDecision`` up to its send: the message and the frequency-cap reservation are carried
    /// out here; a delivery that is to be sent comes back as ``CheckedDelivery/send(_:message:)`` (a provider
    /// without a sender has already failed as `provider_not_supported`).
    func decideUntilSend(_ delivery: ClaimedDelivery, now: Date) async -> CheckedDelivery {
        var facts = delivery.decisionFacts(maxAttempts: maxAttempts, quietHoursSpread: quietHoursSpread)
        facts.frequencyCaps = frequencyCaps(of: delivery)
        facts.providersWithSender = providersWithSender
        facts.deliveryTimeout = deliveryTimeout
        var decision = DeliveryDecision(facts, now: now)
        while true {
            if let expiry = delivery.leaseExpiry {
                decision.leaseRemaining(expiry - .now)
            }
            switch decision.next() {
            case .loadMessage:
                switch await messages.message(for: delivery.notificationID, version: delivery.messageVersion) {
                case .success(let parsed): decision.messageLoaded(parsed)
                case .failure(let problem): decision.messageUnusable(problem.outcome)
                }
                for zone in decision.unknownZones { reportUnknownZone(zone, of: delivery) }
            case .reserveFrequencyCap(let caps, _):
                decision.frequencyCapAnswered(await reserveFrequencyCap(delivery, caps: caps))
            case .complete(let outcome, let provider):
                if case .skipped(reason: .noChannel, _) = outcome, let provider,
                    warnings.allow("no_channel:\(delivery.appID):\(provider)")
                {
                    logger.warning("app has no channel for this provider; its deliveries are skipped",
                                   ["app_id": delivery.appID.uuidString.lowercased(), "provider": provider.rawValue])
                }
                return .complete(outcome, provider: provider)
            case .send(let provider):
                guard senders[provider] != nil, let message = decision.message else {
                    return .complete(
                        .failed(reason: .providerNotSupported, detail: ["provider": .string(provider.rawValue)]),
                        provider: provider)
                }
                return .send(provider, message: message)
            }
        }
    }

    private func reportUnknownZone(_ zone: String, of delivery: ClaimedDelivery) {
        unknownZoneCount.add(1, ordering: .relaxed)
        if zoneWarnings.allow(LogText.shortened(zone)) {
            logger.warning(
                "unknown time zone name; using the fallback (the app's default zone, else UTC)",
                ["zone": LogText.shortened(zone), "app_id": delivery.appID.uuidString.lowercased(),
                 "deliveries_so_far": "\(unknownZoneCount.load(ordering: .relaxed))"])
        }
    }
}

/// Which of a batch's deliveries have been reported, each exactly once, from whichever thread reports it.
private final class ReportedOnce: Sendable {
    private let taken: Mutex<[Bool]>

    init(count: Int) {
        taken = Mutex([Bool](repeating: false, count: count))
    }

    /// Claims `index`: `false` when it was reported already.
    func take(_ index: Int) -> Bool {
        taken.withLock { taken in
            if taken[index] { return false }
            taken[index] = true
            return true
        }
    }

    /// The indexes not reported yet.
    func untaken() -> [Int] {
        taken.withLock { taken in taken.indices.filter { !taken[$0] } }
    }
}

extension ClaimedDelivery {
    /// The claim's columns as the decision reads them (caps, senders and the lease are the pipeline's to add).
    func decisionFacts(maxAttempts: Int, quietHoursSpread: Int) -> DeliveryFacts {
        var facts = DeliveryFacts(
            attempt: attempt, maxAttempts: maxAttempts, notificationCanceled: notificationStatus == "canceled",
            notificationStart: notificationStart, subscriptionID: subscriptionID, capKey: capKey,
            subscriptionStatus: subscriptionStatus, platform: Platform(platform), hasChannel: channelProvider != nil,
            channelPausedUntil: channelPausedUntil, quietHoursStart: quietHoursStart, quietHoursEnd: quietHoursEnd,
            timezone: timezone, defaultTimezone: defaultTimezone)
        facts.quietHoursSpread = quietHoursSpread
        facts.oversizedColumns = oversizedColumns
        facts.localTimeDueAt = localDueAt
        return facts
    }
}
