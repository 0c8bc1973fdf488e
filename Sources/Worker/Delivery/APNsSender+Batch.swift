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
    /// ``HTTP2Client/submit(_:to:answers:)`` per origin; each answer is judged the moment it arrives. An answer
    /// refusing the token is reported once per answer (``SharedProviderTokens`` replaces the token once) and
    /// that delivery is sent again alone with the new token, as the one-delivery path does.
    ///
    /// Certificate channels are not taken (their requests go through a pool per certificate, one delivery at a
    /// time).
    public func send(
        batch: [BatchedSend], context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async -> [Int] {
        var declined: [Int] = []
        // Deliveries by credential fingerprint, in the batch's order.
        var groups: [String: (channel: Channel, indexes: [Int])] = [:]
        var credentialOrder: [String] = []
        for (index, item) in batch.enumerated() {
            switch Result(catching: { try channel(for: item.delivery) }) {
            case .failure(let error):
                completed(index, Self.invalidChannelSettings(error))
            case .success(.certificate):
                declined.append(index)
            case .success(.token(let channel)):
                let fingerprint = channel.tokenCredential.fingerprint
                if groups[fingerprint] == nil {
                    groups[fingerprint] = (channel, [])
                    credentialOrder.append(fingerprint)
                }
                groups[fingerprint]!.indexes.append(index)
            }
        }
        var outgoing: [Outgoing] = []
        var requests: [HTTP2Origin: (requests: [HTTP2Request], slots: [Int])] = [:]
        for fingerprint in credentialOrder {
            guard let (channel, indexes) = groups[fingerprint] else { continue }
            let bearer: String
            do {
                guard let fetched = try await fetchToken(for: channel, by: context.deadline) else {
                    for index in indexes { completed(index, context.deadlineExceeded) }
                    continue
                }
                bearer = fetched
            } catch {
                let outcome = DeliveryOutcome.channelError(reason: "provider_token_failed", detail: ["error": .string("\(error)")])
                for index in indexes { completed(index, outcome) }
                continue
            }
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
            for index in indexes {
                let item = batch[index]
                let apnsDelivery = DeliveryRendering.apnsDelivery(
                    for: item.delivery, message: item.message, topic: channel.credentials.topic, now: context.now,
                    userTags: userTags)
                let renderKey = DeliveryRendering.renderKey(for: item.delivery, message: item.message, variant: provider)
                let request: PushRequest
                switch makeRequest(apnsDelivery, renderKey: renderKey, bearer: bearer) {
                case .success(let made): request = made
                case .failure(let failure):
                    completed(index, failure.outcome)
                    continue
                }
                let origin = channel.origin ?? Self.origin(forEnvironment: item.delivery.apnsEnvironment)
                requests[origin, default: ([], [])].requests.append(ProviderTransport.httpRequest(request, timeout: timeout))
                requests[origin, default: ([], [])].slots.append(outgoing.count)
                outgoing.append(Outgoing(index: index, channel: channel, origin: origin, bearer: bearer, cutByDeadline: cutByDeadline))
            }
        }
        let resends = await exchange(requests, outgoing: outgoing, batch: batch, context: context, completed: completed)
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

    /// Submits every origin's requests and judges the answers as they arrive.
    /// - Returns: the requests whose answer refused their provider token, to be sent again alone.
    private func exchange(
        _ requests: [HTTP2Origin: (requests: [HTTP2Request], slots: [Int])], outgoing: [Outgoing], batch: [BatchedSend],
        context: SendBatchContext, completed: @escaping @Sendable (Int, DeliveryOutcome) -> Void
    ) async -> [(Outgoing, (response: PushResponse, token: String))] {
        guard !outgoing.isEmpty else { return [] }
        // One element per burst of answers (see HTTP2Client.submit), tagged with the origin's slots.
        let (bursts, answered) = AsyncStream.makeStream(of: (slots: [Int], answers: [HTTP2Answer]).self, bufferingPolicy: .unbounded)
        let cancellation = HTTP2SubmissionCancellation()
        var resends: [(Outgoing, (response: PushResponse, token: String))] = []
        await withTaskCancellationHandler {
            for (origin, group) in requests {
                let slots = group.slots
                cancellation.add(client.submit(group.requests, to: origin) { answered.yield((slots, $0)) })
            }
            var answeredSlots = [Bool](repeating: false, count: outgoing.count)
            var left = outgoing.count
            // Ends early only when this task is cancelled (the stream stops then); what was not answered by
            // then is judged below as cancelled.
            bursts: for await (slots, answers) in bursts {
                for answer in answers {
                    let slot = slots[answer.index]
                    guard !answeredSlots[slot] else { continue }
                    answeredSlots[slot] = true
                    judge(answer.result, of: outgoing[slot], batch: batch, context: context, resends: &resends, completed: completed)
                    left -= 1
                    if left == 0 { break bursts }
                }
            }
            answered.finish()
            for (slot, sent) in outgoing.enumerated() where !answeredSlots[slot] {
                judge(.failure(CancellationError()), of: sent, batch: batch, context: context, resends: &resends, completed: completed)
            }
        } onCancel: {
            cancellation.cancel()
        }
        return resends
    }

    /// One answer of the batch: judged and completed, or kept for a resend when it refused the token.
    private func judge(
        _ result: Result<HTTP2Response, any Error>, of sent: Outgoing, batch: [BatchedSend], context: SendBatchContext,
        resends: inout [(Outgoing, (response: PushResponse, token: String))],
        completed: @Sendable (Int, DeliveryOutcome) -> Void
    ) {
        switch ProviderTransport.response(result, origin: sent.origin) {
        case .failure(let failure):
            if sent.cutByDeadline, case .failure(let error as HTTP2Error) = result, error.code == .requestTimeout {
                completed(sent.index, context.deadlineExceeded)
            } else {
                completed(sent.index, transportOutcome(failure, channel: sent.channel))
            }
        case .success(let response):
            if APNsResponseClassifier.requiresNewProviderToken(response) {
                tokens.reportRejected(sent.bearer, for: sent.channel.tokenCredential)
                resends.append((sent, (response, sent.bearer)))
            } else {
                completed(sent.index, judge(response, channel: sent.channel, delivery: batch[sent.index].delivery, origin: sent.origin))
            }
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
