import DeliveryCore
import Foundation
import HTTP2
import Providers
import Synchronization

extension APNsSender: BatchingProviderSender {
    /// One request of a batch on its way: whose it is and what its answer is judged against.
    private struct Outgoing: Sendable {
        var index: Int
        var channel: Channel
        var origin: HTTP2Origin
        var bearer: String
        /// The request's own timeout was cut short to end by the batch's deadline, so a timeout is that
        /// deadline's (`deadline_exceeded`), not the request timeout's.
        var cutByDeadline: Bool
    }

    /// Token-based channels' deliveries of a claimed batch, sent together: the channel of each resolved from
    /// the cache, one provider token per credential, every request built, then one
    /// ``HTTP2Client/submit(_:to:answers:)`` per origin; each answer is judged where and when it arrives. An answer
    /// refusing the token is reported once per answer (``SharedProviderTokens`` replaces the token once) and
    /// that delivery is sent again alone with the new token, as the one-delivery path does.
    ///
    /// Certificate channels are not taken (their requests go through a pool per certificate, one delivery at a
    /// time).
    public func send(
        batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async -> [Int] {
        var declined: [Int] = []
        // Deliveries by credential fingerprint, in the batch's order, each with its own app's channel: apps may share
        // one signing key (one provider token for all of them) while each has its own topic and endpoint.
        var groups = GroupsByKey<String, (channel: Channel, members: [(index: Int, channel: Channel)])>()
        for (index, item) in batch.enumerated() {
            switch Result(catching: { try channel(for: item.delivery) }) {
            case .failure(let error):
                completed(index, Self.invalidChannelSettings(error))
            case .success(.certificate):
                declined.append(index)
            case .success(.token(let channel)):
                groups.update(channel.tokenCredential.fingerprint, new: (channel, [])) { $0.members.append((index, channel)) }
            }
        }
        var outgoing: [Outgoing] = []
        var requests = GroupsByKey<HTTP2Origin, (requests: [HTTP2Request], slots: [Int])>()
        let bearers = await fetchTokens(for: groups.groups.map(\.value.channel), by: context.deadline)
        for (fingerprint, (_, members)) in groups.groups {
            guard let fetch = bearers[fingerprint] else { continue }
            let indexes = members.map(\.index)
            let bearer: String
            do {
                guard let fetched = try fetch.get() else {
                    for index in indexes { completed(index, context.deadlineExceeded) }
                    continue
                }
                bearer = fetched
            } catch {
                let outcome = DeliveryOutcome.channelError(reason: .providerTokenFailed, detail: ["error": .string("\(error)")])
                for index in indexes { completed(index, outcome) }
                continue
            }
            // Built once for the credential's requests, which then share one `authorization` string.
            let authorization = APNsProviderAuthorization(bearerToken: bearer)
            // One timeout for the credential's requests (so the client keeps one deadline timer for them): the
            // request timeout, or what is left of the batch's deadline when that is less.
            var timeout = requestTimeout
            var cutByDeadline = false
            if let deadline = context.deadline {
                let left = deadline - .now
                if left <= .zero {
                    for index in indexes { completed(index, context.deadlineExceeded) }
                    continue
                }
                if left < timeout { (timeout, cutByDeadline) = (left, true) }
            }
            for (index, channel) in members {
                let item = batch[index]
                let apnsDelivery = DeliveryRendering.apnsDelivery(
                    for: item.delivery, message: item.message, topic: channel.credentials.topic, now: context.now,
                    userTags: userTags)
                let renderKey = DeliveryRendering.renderKey(for: item.delivery, message: item.message, variant: provider.rawValue)
                let request: PushRequest
                switch makeRequest(apnsDelivery, renderKey: renderKey, authorization: authorization) {
                case .success(let made): request = made
                case .failure(let failure):
                    completed(index, failure.outcome)
                    continue
                }
                let origin = channel.origin ?? Self.origin(forEnvironment: item.delivery.apnsEnvironment)
                let slot = outgoing.count
                requests.update(origin, new: ([], [])) { group in
                    group.requests.append(ProviderTransport.httpRequest(request, timeout: timeout, tenant: channel.tenant))
                    group.slots.append(slot)
                }
                outgoing.append(Outgoing(index: index, channel: channel, origin: origin, bearer: bearer, cutByDeadline: cutByDeadline))
            }
        }
        let resends = await exchange(requests.groups, outgoing: outgoing, batch: batch, context: context, completed: completed)
        if !resends.isEmpty {
            await withDiscardingTaskGroup { group in
                for (sent, refusal) in resends {
                    let item = batch[sent.index]
                    group.addTask {
                        completed(sent.index, await self.resend(item, refused: refusal, channel: sent.channel, context: context))
                    }
                }
            }
        }
        return declined
    }

    /// Submits every origin's requests and judges the answers as they arrive, where they arrive: on the HTTP/2
    /// client's event loop, in its answer callback, so a burst of answers is judged and completed without a
    /// hop to the cooperative pool. Judging is pure; completing queues the completion for the writer, counts
    /// it, and at most once per app, kind and hour writes a warning line (the same short stderr write the
    /// pool's paths make). This task waits once, for the last answer.
    /// - Returns: the requests whose answer refused their provider token, to be sent again alone.
    private func exchange(
        _ requests: [(key: HTTP2Origin, value: (requests: [HTTP2Request], slots: [Int]))], outgoing: [Outgoing], batch: [BatchedSend],
        context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async -> [(Outgoing, (response: PushResponse, token: String))] {
        guard !outgoing.isEmpty else { return [] }
        let answers = BatchAnswers<(Outgoing, (response: PushResponse, token: String))>(count: outgoing.count)
        let cancellation = HTTP2SubmissionCancellation()
        let judgeOne: @Sendable (Int, Result<HTTP2Response, any Error>) -> Void = { slot, result in
            let resend = self.judge(result, of: outgoing[slot], batch: batch, context: context, completed: completed)
            answers.judged(resend: resend.map { (outgoing[slot], $0) })
        }
        await withTaskCancellationHandler {
            for (origin, group) in requests {
                let slots = group.slots
                cancellation.add(client.submit(group.requests, to: origin) { burst in
                    for answer in burst {
                        let slot = slots[answer.index]
                        if answers.take(slot) { judgeOne(slot, answer.result) }
                    }
                })
            }
            await answers.allJudged()
        } onCancel: {
            // What is not answered by now is judged as cancelled here, as the client will report it, so the
            // batch ends at once whatever the client's loop is doing (the loop's own report of those requests
            // comes later and is ignored).
            cancellation.cancel()
            for slot in answers.takeUnanswered() { judgeOne(slot, .failure(CancellationError())) }
        }
        return answers.resends
    }

    /// One answer of the batch: judged and completed, or returned for a resend when it refused the token.
    private func judge(
        _ result: Result<HTTP2Response, any Error>, of sent: Outgoing, batch: [BatchedSend], context: SendBatchContext,
        completed: @Sendable (Int, DeliveryOutcome) -> Void
    ) -> (response: PushResponse, token: String)? {
        switch ProviderTransport.response(result, origin: sent.origin, pacer: pacer) {
        case .failure(let failure):
            if sent.cutByDeadline, case .failure(let error as HTTP2Error) = result, error.code == .requestTimeout {
                completed(sent.index, context.deadlineExceeded)
            } else {
                completed(sent.index, transportOutcome(failure, channel: sent.channel))
            }
        case .success(let response):
            if APNsResponseClassifier.requiresNewProviderToken(response) {
                tokens.reportRejected(sent.bearer, for: sent.channel.tokenCredential)
                return (response, sent.bearer)
            }
            completed(sent.index, judge(response, channel: sent.channel, delivery: batch[sent.index].delivery, origin: sent.origin))
        }
        return nil
    }

    /// The provider tokens of a batch's credentials by fingerprint, fetched side by side: a batch spanning many
    /// apps whose tokens are due for replacement (each a database round trip, perhaps a signature) waits for
    /// the slowest, not for their sum. One credential (the usual batch) is fetched without a child task.
    private func fetchTokens(for channels: [Channel], by deadline: ContinuousClock.Instant?) async -> [String: Result<String?, any Error>] {
        func fetch(_ channel: Channel) async -> Result<String?, any Error> {
            do { return .success(try await fetchToken(for: channel, by: deadline)) } catch { return .failure(error) }
        }
        if channels.count == 1, let channel = channels.first {
            return [channel.tokenCredential.fingerprint: await fetch(channel)]
        }
        return await withTaskGroup(of: (String, Result<String?, any Error>).self) { group in
            for channel in channels {
                group.addTask { (channel.tokenCredential.fingerprint, await fetch(channel)) }
            }
            var results: [String: Result<String?, any Error>] = [:]
            for await (fingerprint, result) in group { results[fingerprint] = result }
            return results
        }
    }

    /// The provider token for a batch's credential, fetched by the batch's deadline (`nil`: not in time).
    private func fetchToken(for channel: Channel, by deadline: ContinuousClock.Instant?) async throws -> String? {
        guard let deadline else { return try await token(for: channel) }
        return try await DeliveryDeadlines.value(by: deadline) { try await self.token(for: channel) }
    }

    /// A delivery whose batched request was refused for its token, sent again alone by the batch's deadline.
    private func resend(
        _ item: BatchedSend, refused: (response: PushResponse, token: String), channel: Channel, context: SendBatchContext
    ) async -> DeliveryOutcome {
        let exchange: @Sendable () async -> DeliveryOutcome = {
            await self.send(item.delivery, message: item.message, now: context.now, token: channel, refused: refused)
        }
        guard let deadline = context.deadline else { return await exchange() }
        return (try? await DeliveryDeadlines.value(by: deadline, exchange)) ?? context.deadlineExceeded
    }
}

/// Groups in the order their keys first came, found by key. A batch's deliveries nearly all share one credential
/// and one origin, so the previous lookup's group is tried first: a comparison instead of hashing the key (a
/// fingerprint string, an origin) once or twice per delivery.
private struct GroupsByKey<Key: Hashable, Value> {
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

/// The answers of one batched exchange, taken from whichever thread they arrive on (the client's event loop,
/// or the cancelling one): each request is judged exactly once, and the exchange's task is resumed once every
/// one has been.
private final class BatchAnswers<Resend: Sendable>: Sendable {
    private struct State {
        var taken: [Bool]
        var unjudged: Int
        var resends: [Resend] = []
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state: Mutex<State>

    init(count: Int) {
        state = Mutex(State(taken: [Bool](repeating: false, count: count), unjudged: count))
    }

    /// Claims `slot` for judging: `false` when it was already judged (an answer after the batch was cancelled).
    func take(_ slot: Int) -> Bool {
        state.withLock { state in
            if state.taken[slot] { return false }
            state.taken[slot] = true
            return true
        }
    }

    /// Claims every slot not yet taken.
    func takeUnanswered() -> [Int] {
        state.withLock { state in
            var slots: [Int] = []
            for slot in state.taken.indices where !state.taken[slot] {
                state.taken[slot] = true
                slots.append(slot)
            }
            return slots
        }
    }

    /// One slot's judging is over (its completion reported, or a resend kept); the last one resumes the waiter.
    func judged(resend: Resend?) {
        let waiter: CheckedContinuation<Void, Never>? = state.withLock { state in
            if let resend { state.resends.append(resend) }
            state.unjudged -= 1
            guard state.unjudged == 0 else { return nil }
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns once every slot has been judged.
    func allJudged() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.unjudged == 0 { return true }
                state.waiter = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// The resends kept, in the order their answers were judged (read after ``allJudged()``).
    var resends: [Resend] { state.withLock { $0.resends } }
}
