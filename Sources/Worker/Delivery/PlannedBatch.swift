import DeliveryCore
import Foundation
import HTTP2
import Providers
import Synchronization

/// A provider sender's part of a batched send, driven by ``PlannedBatch``: each delivery's channel, the token
/// its requests carry, its request (through the provider's request plan: ``APNsRequestPlan``,
/// ``FCMRequestPlan``, ``WebPushRequestPlan``), and the judging of its answer against the channel's evidence.
protocol PlannedBatchSender: ProviderSender {
    /// One app's parsed channel, as the sender's cache keeps it.
    associatedtype PlannedChannel: Sendable
    /// A fetched token as the sender's requests use it (e.g. with its `authorization` field built once).
    associatedtype Token: Sendable

    /// Paces deliveries withdrawn from a busy origin (``OriginPacing``).
    var pacer: OriginPacer { get }
    /// How long one request may wait for its answer.
    var requestTimeout: Duration { get }
    /// The requests' origins are the subscribers' own (Web Push endpoints): transport failures are recorded
    /// with fixed sentences (``ProviderTransport/outcome(for:origin:subscriberChosen:)``).
    var subscriberChosenOrigins: Bool { get }

    /// The app's channel for `delivery` from the sender's cache, built from the row's settings when missing.
    /// - Throws: when the settings do not parse (``plannedChannel(for:)`` makes that the outcome).
    func channel(for delivery: ClaimedDelivery) throws -> PlannedChannel
    /// The app's channel for `delivery` when the sender's cache holds it for the row's current settings;
    /// never builds one (no credential is parsed).
    func cachedChannel(for delivery: ClaimedDelivery) -> PlannedChannel?
    /// The channel of `item`'s app, or the outcome to record without sending (settings that do not parse, a
    /// subscription held by ``CredentialHolds``).
    func plannedChannel(for item: BatchedSend) -> Result<PlannedChannel, PlanRefusal>
    /// The shared token `channel`'s requests carry (one fetch per key and round); `nil`: they carry none.
    func tokenKey(of channel: PlannedChannel) -> ProviderTokenKey?
    /// The fleet's current token for `channel`'s credential, or the outcome to record for its deliveries.
    func token(for channel: PlannedChannel) async -> Result<Token, PlanRefusal>
    /// The token's text (two fetches giving the same text gave the same token).
    func text(of token: Token) -> String
    /// An answer refused `token`: it is replaced once fleet-wide (``SharedProviderTokens/reportRejected(_:for:)``).
    func reportRefused(_ token: Token, for channel: PlannedChannel)
    /// `item`'s request through the channel's plan, with `token` when the channel's requests carry one.
    func plannedRequest(for item: BatchedSend, channel: PlannedChannel, token: Token?, now: Date) -> PlannedRequest
    /// The HTTP/2 client and origin a planned request goes through.
    func route(_ destination: PushDestination, channel: PlannedChannel) -> (client: HTTP2Client, origin: HTTP2Origin)
    /// The app, as its requests' tenant (``HTTP2Request/tenant``).
    func tenant(of channel: PlannedChannel) -> HTTP2Tenant
    /// The provider's answer to `item`'s request, judged through the channel's plan and evidence;
    /// ``PlannedAnswer/tokenRefused`` only when not `resent`. `token`: the one the request carried (`nil` when
    /// none, or when the answer is a refusal judged again because its token could not be replaced).
    func judge(
        _ response: PushResponse, of item: BatchedSend, channel: PlannedChannel, origin: HTTP2Origin, token: Token?, resent: Bool
    ) -> BatchVerdict
    /// A transport failure's outcome for `channel` (an endpoint the channel chose pauses it instead of failing).
    func transportOutcome(_ outcome: DeliveryOutcome, channel: PlannedChannel) -> DeliveryOutcome
}

/// What a sender makes of one answer in a batch.
enum BatchVerdict: Sendable {
    case outcome(DeliveryOutcome)
    /// The answer refused the request's token: resend once with a new one.
    case tokenRefused
}

extension PlannedBatchSender {
    var subscriberChosenOrigins: Bool { false }

    /// The token ``tokenKey(of:)`` names for the delivery's channel when the channel is cached already; `nil`
    /// otherwise. The claim asks this on the thread that claims for every app, so it never parses an app's
    /// credentials (a PKCS#12 or RSA key parse, again for every batch while an app's settings fail): an app's
    /// first batch gets its token in the send stage, as every batch did before the claim read tokens.
    public func sharedTokenKey(for delivery: ClaimedDelivery) -> ProviderTokenKey? {
        cachedChannel(for: delivery).flatMap(tokenKey(of:))
    }
}

/// The one send path of every provider: a claimed batch's deliveries (a batch of one for a delivery that goes
/// alone), each channel resolved, one token fetched per credential, every request built by the provider's plan,
/// then one ``HTTP2Client/submit(_:to:answers:)`` per client and origin; each answer is judged where and when it
/// arrives, without a task per delivery. The deliveries whose answer refused their token are resent once, as a
/// batch, after the token was replaced (``SharedProviderTokens``: once fleet-wide); one whose token could not be
/// replaced yet (Apple's 20-minute floor) keeps the refusal as its outcome.
enum PlannedBatch {
    /// A delivery of a round: its batch index, its channel, and for a resend the answer that refused its token.
    struct Member<Sender: PlannedBatchSender>: Sendable {
        var index: Int
        var channel: Sender.PlannedChannel
        var refused: Refusal<Sender.Token>?

        init(index: Int, channel: Sender.PlannedChannel, refused: Refusal<Sender.Token>? = nil) {
            self.index = index
            self.channel = channel
            self.refused = refused
        }
    }

    /// An answer that refused a token, and that token.
    struct Refusal<Token: Sendable>: Sendable {
        var response: PushResponse
        var token: Token
        var origin: HTTP2Origin
    }

    /// One request of a round on its way: whose it is and what its answer is judged against.
    private struct Outgoing<Sender: PlannedBatchSender>: Sendable {
        var index: Int
        var channel: Sender.PlannedChannel
        var origin: HTTP2Origin
        var token: Sender.Token?
        /// The request's own timeout was cut short to end by the batch's deadline, so a timeout is that
        /// deadline's (`deadline_exceeded`), not the request timeout's.
        var cutByDeadline: Bool
    }

    /// Requests sharing a client and an origin: one ``HTTP2Client/submit(_:to:answers:)``.
    private struct Route: Hashable {
        var client: ObjectIdentifier
        var origin: HTTP2Origin
    }

    static func send<Sender: PlannedBatchSender>(
        _ sender: Sender, batch: [BatchedSend], context: SendBatchContext,
        completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async {
        var members: [Member<Sender>] = []
        members.reserveCapacity(batch.count)
        for (index, item) in batch.enumerated() {
            switch sender.plannedChannel(for: item) {
            case .failure(let refusal): completed(index, refusal.outcome)
            case .success(let channel): members.append(Member(index: index, channel: channel))
            }
        }
        let refused = await round(sender, members, batch: batch, context: context, resent: false, completed: completed)
        guard !refused.isEmpty else { return }
        _ = await round(sender, refused, batch: batch, context: context, resent: true, completed: completed)
    }

    /// One round: tokens, requests, exchange. - Returns: the members whose answer refused their token.
    private static func round<Sender: PlannedBatchSender>(
        _ sender: Sender, _ members: [Member<Sender>], batch: [BatchedSend], context: SendBatchContext,
        resent: Bool, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async -> [Member<Sender>] {
        // One channel per token key (apps may share one signing key or service account, each with its own
        // topic and endpoint), in the batch's order.
        var credentials = GroupsByKey<ProviderTokenKey, Sender.PlannedChannel>()
        for member in members {
            if let key = sender.tokenKey(of: member.channel) { credentials.update(key, new: member.channel) { _ in } }
        }
        let tokens = await fetchTokens(sender, credentials.groups, by: context.deadline)
        // One timeout for the round's requests (so the client keeps one deadline timer for them): the request
        // timeout, or what is left of the batch's deadline when that is less.
        var timeout = sender.requestTimeout
        var cutByDeadline = false
        if let deadline = context.deadline {
            let left = deadline - .now
            if left <= .zero {
                for member in members { completed(member.index, context.deadlineExceeded) }
                return []
            }
            if left < timeout { (timeout, cutByDeadline) = (left, true) }
        }
        var outgoing: [Outgoing<Sender>] = []
        outgoing.reserveCapacity(members.count)
        var routes = GroupsByKey<Route, (client: HTTP2Client, origin: HTTP2Origin, requests: [HTTP2Request], slots: [Int])>()
        // The previous member's key and token: a batch's deliveries nearly all share one credential, so a
        // comparison replaces hashing the key per delivery.
        var last: (key: ProviderTokenKey, token: Result<Sender.Token, PlanRefusal>?)?
        for member in members {
            let item = batch[member.index]
            var token: Sender.Token?
            if let key = sender.tokenKey(of: member.channel) {
                let fetched: Result<Sender.Token, PlanRefusal>?
                if let last, last.key == key {
                    fetched = last.token
                } else {
                    fetched = tokens[key]
                    last = (key, fetched)
                }
                switch fetched {
                case .success(let fetched)?: token = fetched
                case .failure(let refusal)?:
                    completed(member.index, refusal.outcome)
                    continue
                case nil:
                    completed(member.index, context.deadlineExceeded)
                    continue
                }
            }
            if let refused = member.refused, let token, sender.text(of: refused.token) == sender.text(of: token) {
                // Not replaced (too young for the provider's floor): the refusal stands.
                completed(
                    member.index, outcome(sender.judge(
                        refused.response, of: item, channel: member.channel, origin: refused.origin, token: nil, resent: true)))
                continue
            }
            switch sender.plannedRequest(for: item, channel: member.channel, token: token, now: context.now) {
            case .record(let outcome):
                completed(member.index, outcome)
            case .send(let request, let destination):
                let (client, origin) = sender.route(destination, channel: member.channel)
                let slot = outgoing.count
                routes.update(Route(client: ObjectIdentifier(client), origin: origin), new: (client, origin, [], [])) { group in
                    group.requests.append(ProviderTransport.httpRequest(request, timeout: timeout, tenant: sender.tenant(of: member.channel)))
                    group.slots.append(slot)
                }
                outgoing.append(Outgoing(index: member.index, channel: member.channel, origin: origin, token: token, cutByDeadline: cutByDeadline))
            }
        }
        return await exchange(
            sender, routes.groups.map(\.value), outgoing: outgoing, batch: batch, context: context, resent: resent,
            completed: completed)
    }

    private static func outcome(_ verdict: BatchVerdict) -> DeliveryOutcome {
        switch verdict {
        case .outcome(let outcome): outcome
        // Never asked of a resend's answer; a refusal judged a second time is a channel error like any 403.
        case .tokenRefused: .channelError(reason: .invalidProviderToken, detail: ["error": "the provider refused the replaced token"])
        }
    }

    /// Submits every route's requests and judges the answers as they arrive, in this task: the HTTP/2 client's
    /// event loop only hands each burst of answers back (``BatchAnswers``), and the judging, the after-send
    /// policy, the counting and logging of each completion run here, on the cooperative pool, one hop per burst
    /// rather than per answer. The loop's thread, which every connection of the process shares, does only
    /// framing and TLS.
    /// - Returns: the members whose answer refused their token, to be resent.
    private static func exchange<Sender: PlannedBatchSender>(
        _ sender: Sender, _ routes: [(client: HTTP2Client, origin: HTTP2Origin, requests: [HTTP2Request], slots: [Int])],
        outgoing: [Outgoing<Sender>], batch: [BatchedSend], context: SendBatchContext, resent: Bool,
        completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async -> [Member<Sender>] {
        guard !outgoing.isEmpty else { return [] }
        let answers = BatchAnswers(count: outgoing.count)
        let cancellation = HTTP2SubmissionCancellation()
        var resends: [Member<Sender>] = []
        func judgeOne(_ slot: Int, _ result: Result<HTTP2Response, any Error>) {
            let sent = outgoing[slot]
            switch ProviderTransport.response(
                result, origin: sent.origin, subscriberChosen: sender.subscriberChosenOrigins, pacer: sender.pacer)
            {
            case .failure(let failure):
                if Self.cutByDeadline(result, sent: sent, context: context) {
                    completed(sent.index, context.deadlineExceeded)
                } else {
                    completed(sent.index, sender.transportOutcome(failure.outcome, channel: sent.channel))
                }
            case .success(let response):
                switch sender.judge(
                    response, of: batch[sent.index], channel: sent.channel, origin: sent.origin, token: sent.token, resent: resent)
                {
                case .outcome(let outcome):
                    completed(sent.index, outcome)
                case .tokenRefused:
                    if let token = sent.token {
                        sender.reportRefused(token, for: sent.channel)
                        resends.append(
                            Member(index: sent.index, channel: sent.channel, refused: Refusal(response: response, token: token, origin: sent.origin)))
                    } else {
                        completed(sent.index, Self.outcome(sender.judge(
                            response, of: batch[sent.index], channel: sent.channel, origin: sent.origin, token: nil, resent: true)))
                    }
                }
            }
        }
        await withTaskCancellationHandler {
            for route in routes {
                let slots = route.slots
                cancellation.add(route.client.submit(route.requests, to: route.origin) { burst in
                    answers.hand(burst.lazy.map { (slots[$0.index], $0.result) })
                })
            }
            var judged = 0
            while judged < outgoing.count {
                for (slot, result) in await answers.next() {
                    judgeOne(slot, result)
                    judged += 1
                }
            }
        } onCancel: {
            // What is not answered by now is handed back as cancelled, as the client will report it, so the batch
            // ends at once whatever the client's loop is doing (the loop's own report of those requests comes
            // later and is ignored).
            cancellation.cancel()
            answers.cancelUnanswered()
        }
        return resends
    }

    /// A request that ended without an answer because the batch's deadline came: its own timeout was cut to
    /// the deadline and ran out, or the batch was cancelled once its deadline had passed.
    private static func cutByDeadline<Sender: PlannedBatchSender>(
        _ result: Result<HTTP2Response, any Error>, sent: Outgoing<Sender>, context: SendBatchContext
    ) -> Bool {
        guard case .failure(let error) = result else { return false }
        if sent.cutByDeadline, let error = error as? HTTP2Error, error.code == .requestTimeout { return true }
        if error is CancellationError, let deadline = context.deadline, deadline <= .now { return true }
        return false
    }

    /// The tokens of a round's credentials by key, fetched side by side: a batch spanning many apps whose tokens
    /// are due for replacement (each a database round trip, perhaps a signature or an HTTP exchange) waits for
    /// the slowest, not for their sum. One credential (the usual batch) is fetched without a child task. A
    /// credential whose fetch did not end by the deadline has no entry.
    private static func fetchTokens<Sender: PlannedBatchSender>(
        _ sender: Sender, _ credentials: [(key: ProviderTokenKey, value: Sender.PlannedChannel)], by deadline: ContinuousClock.Instant?
    ) async -> [ProviderTokenKey: Result<Sender.Token, PlanRefusal>] {
        @Sendable func fetch(_ channel: Sender.PlannedChannel) async -> Result<Sender.Token, PlanRefusal>? {
            guard let deadline else { return await sender.token(for: channel) }
            do {
                return try await DeliveryDeadlines.value(by: deadline) { await sender.token(for: channel) }
            } catch {
                return nil
            }
        }
        if credentials.count <= 1 {
            guard let (key, channel) = credentials.first, let fetched = await fetch(channel) else { return [:] }
            return [key: fetched]
        }
        return await withTaskGroup(of: (ProviderTokenKey, Result<Sender.Token, PlanRefusal>?).self) { group in
            for (key, channel) in credentials {
                group.addTask { (key, await fetch(channel)) }
            }
            var results: [ProviderTokenKey: Result<Sender.Token, PlanRefusal>] = [:]
            for await (key, result) in group {
                if let result { results[key] = result }
            }
            return results
        }
    }
}

/// Groups in the order their keys first came, found by key. A batch's deliveries nearly all share one credential
/// and one origin, so the previous lookup's group is tried first: a comparison instead of hashing the key (a
/// fingerprint string, an origin) once or twice per delivery.
struct GroupsByKey<Key: Hashable, Value> {
    private(set) var groups: [(key: Key, value: Value)] = []
    private var positions: [Key: Int] = [:]
    private var last: Int?

    /// Changes the group of `key` with `change`, first adding it as `new` when the key is not known yet.
    mutating func update(_ key: Key, new: @autoclosure () -> Value, _ change: (inout Value) -> Void) {
        let position: Int
        if let last, groups[last].key == key {
            position = last
        } else if let known = positions[key] {
            position = known
        } else {
            position = groups.count
            groups.append((key, new()))
            positions[key] = position
        }
        last = position
        change(&groups[position].value)
    }
}
/// The answers of one batched exchange as they are handed back, from whichever thread they arrive on (the
/// HTTP/2 client's event loop, or the cancelling one), to the exchange's task, which judges them: each
/// request's answer is taken exactly once, and the task waits only while none is waiting to be judged.
private final class BatchAnswers: Sendable {
    typealias Answer = (slot: Int, result: Result<HTTP2Response, any Error>)

    private struct State {
        var taken: [Bool]
        var arrived: [Answer] = []
        var waiter: CheckedContinuation<[Answer], Never>?
    }

    private let state: Mutex<State>

    init(count: Int) {
        state = Mutex(State(taken: [Bool](repeating: false, count: count)))
    }

    /// Queues the answers whose slot was not taken yet (an answer after the batch was cancelled is not), and
    /// wakes the task if it waits.
    func hand(_ answers: some Sequence<Answer>) {
        let woken: (CheckedContinuation<[Answer], Never>, [Answer])? = state.withLock { state in
            for answer in answers where !state.taken[answer.slot] {
                state.taken[answer.slot] = true
                state.arrived.append(answer)
            }
            guard !state.arrived.isEmpty, let waiter = state.waiter else { return nil }
            state.waiter = nil
            defer { state.arrived = [] }
            return (waiter, state.arrived)
        }
        if let (waiter, arrived) = woken { waiter.resume(returning: arrived) }
    }

    /// Hands back every slot not answered yet as cancelled.
    func cancelUnanswered() {
        let unanswered: [Answer] = state.withLock { state in
            state.taken.indices.filter { !state.taken[$0] }.map { ($0, .failure(CancellationError())) }
        }
        hand(unanswered)
    }

    /// The answers handed back since the last call, waiting for one when there is none.
    func next() async -> [Answer] {
        await withCheckedContinuation { (continuation: CheckedContinuation<[Answer], Never>) in
            let arrived: [Answer]? = state.withLock { state in
                guard !state.arrived.isEmpty else {
                    state.waiter = continuation
                    return nil
                }
                defer { state.arrived = [] }
                return state.arrived
            }
            if let arrived { continuation.resume(returning: arrived) }
        }
    }
}
