import DeliveryCore
import Emulator
import Foundation
import HTTP2
import PushCrypto
import Synchronization
import Testing
@testable import Worker

/// The APNs sender's batch path against the emulator: each delivery of a batch ends exactly once, with the
/// outcome the one-delivery path gives the same delivery, and nothing outlives the batch's deadline.
@Suite("APNs batches against the emulator")
struct APNsBatchTests {
    let bounds = CacheBoundsTests()

    /// Device tokens by the emulator's conventions (docs/emulator.md), each a different answer.
    static let tokens = [
        "a3" + String(repeating: "0", count: 62),  // accepted
        "0400" + String(repeating: "1", count: 60),  // BadDeviceToken
        "0410" + String(repeating: "2", count: 60),  // Unregistered
        "0429" + String(repeating: "3", count: 60),  // TooManyRequests
        "0413" + String(repeating: "4", count: 60),  // PayloadTooLarge
        "abc",  // not a device token: refused by the request checks before anything is sent
    ]

    func batch(_ emulator: EmulatorHarness) throws -> [BatchedSend] {
        let message = try NotificationMessage(json: ["headings": ["en": "Hi"], "contents": ["en": "A push"]])
        let app = UUID()
        var sends = Self.tokens.map { token in
            var claimed = bounds.delivery(app: app, settings: emulator.channelSettings, platform: "ios", token: token)
            claimed.channelEndpoint = emulator.endpoint
            claimed.apnsID = UUID()
            return BatchedSend(delivery: claimed, message: message)
        }
        // An app whose settings are not an APNs channel: its channel pauses, the others' sends go on.
        var broken = bounds.delivery(app: UUID(), settings: #"{"team_id": 7}"#, platform: "ios", token: Self.tokens[0])
        broken.channelEndpoint = emulator.endpoint
        sends.append(BatchedSend(delivery: broken, message: message))
        return sends
    }

    /// An outcome without its volatile parts (timestamps, retry times, the emulator's ids).
    static func shape(_ outcome: DeliveryOutcome) -> String {
        switch outcome {
        case .sent: "sent"
        case .failed(let reason, _, let invalidate): "failed/\(reason)/\(invalidate)"
        case .retry(let reason, _, _): "retry/\(reason)"
        case .channelError(let reason, _, _): "channel/\(reason)"
        case .skipped(let reason, _): "skipped/\(reason)"
        case .deferred: "deferred"
        }
    }

    /// Sends `sends` as one batch and collects every outcome reported, by index. The deadline (300 s) only
    /// bounds a hang: beside the other suites on 2 cores, the process has been seen to stall for 30 s.
    static func sendCollecting(_ sends: [BatchedSend], through sender: APNsSender) async -> (declined: [Int], outcomes: [Int: [DeliveryOutcome]]) {
        let outcomes = Mutex<[Int: [DeliveryOutcome]]>([:])
        let context = SendBatchContext(now: Date(), deadline: .now + .seconds(300), timeout: .seconds(300))
        let declined: [Int] = []  // every delivery is taken: certificate channels too
        await sender.send(batch: sends, context: context) { index, outcome in
            outcomes.withLock { $0[index, default: []].append(outcome) }
        }
        return (declined, outcomes.withLock { $0 })
    }

    @Test func eachDeliveryEndsOnceWithTheOutcomeItGetsAlone() async throws {
        try await CacheBoundsTests.withEmulatorClient { emulator, client in
            let sends = try batch(emulator)
            let alone = APNsSender(client: client, requestTimeout: .seconds(300), logger: quietLogger, egressPolicy: .unrestricted)
            var expected: [String] = []
            for send in sends { expected.append(Self.shape(await alone.sendOne(send.delivery, message: send.message, now: Date()))) }
            // (Not invalidated on 410: the test subscription's token was updated after the emulator's timestamp.)
            #expect(expected == [
                "sent", "failed/bad_device_token/true", "failed/unregistered/false", "retry/too_many_requests",
                "failed/payload_too_large/false", "failed/bad_device_token_format/false", "channel/invalid_channel_settings",
            ])

            let batched = APNsSender(client: client, requestTimeout: .seconds(300), logger: quietLogger, egressPolicy: .unrestricted)
            let (declined, got) = await Self.sendCollecting(sends, through: batched)
            #expect(declined.isEmpty)
            #expect(got.count == sends.count && got.values.allSatisfy { $0.count == 1 })
            #expect(sends.indices.map { got[$0].map { Self.shape($0[0]) } ?? "none" } == expected)
        }
    }

    /// Two apps with one signing key (one provider token for both) and topics of their own, in one batch: each
    /// request carries its own app's topic. The batch once took the first app's topic and endpoint for every
    /// delivery of the key, so the second app's pushes went to the first one's bundle (APNs:
    /// DeviceTokenNotForTopic) and through the first one's endpoint.
    @Test func appsSharingASigningKeyKeepTheirOwnTopics() async throws {
        try await CacheBoundsTests.withEmulatorClient { emulator, client in
            let message = try NotificationMessage(json: ["headings": ["en": "Hi"], "contents": ["en": "A push"]])
            func settings(topic: String) throws -> String {
                var object = try #require(try JSONSerialization.jsonObject(with: Data(emulator.channelSettings.utf8)) as? [String: String])
                object["topic"] = topic
                return String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
            }
            var sends: [BatchedSend] = []
            for (app, topic) in [(UUID(), "com.company.a"), (UUID(), "com.company.b")] {
                for device in 0..<3 {
                    var claimed = bounds.delivery(
                        app: app, settings: try settings(topic: topic), platform: "ios",
                        token: "a\(device)" + String(repeating: topic.hasSuffix("a") ? "a" : "b", count: 62))
                    claimed.channelEndpoint = emulator.endpoint
                    claimed.apnsID = UUID()
                    sends.append(BatchedSend(delivery: claimed, message: message))
                }
            }
            let sender = APNsSender(client: client, requestTimeout: .seconds(300), logger: quietLogger, egressPolicy: .unrestricted)
            let (_, got) = await Self.sendCollecting(sends, through: sender)
            #expect(sends.indices.map { got[$0].map { Self.shape($0[0]) } } == Array(repeating: "sent", count: 6))
            let topics = Dictionary(emulator.apns.acceptedNotifications.map { ($0.deviceToken, $0.topic) }, uniquingKeysWith: { first, _ in first })
            #expect(topics.count == 6)
            #expect(topics.allSatisfy { token, topic in topic == (token.hasSuffix("a") ? "com.company.a" : "com.company.b") })
        }
    }

    /// Answers held back (5 s) past the batch's deadline (1.5 s): every request is cut at the deadline, not at
    /// the request timeout (30 s), and ends as `deadline_exceeded`; one the deadline missed would be `sent`.
    /// No wall-clock bound is asserted: beside the other suites on 2 cores this test's threads can wait for the
    /// CPU longer than any bound short enough to mean something.
    @Test func requestsEndAtTheBatchDeadline() async throws {
        try await CacheBoundsTests.withEmulatorClient(latency: 5) { emulator, client in
            let sender = APNsSender(client: client, requestTimeout: .seconds(30), logger: quietLogger, egressPolicy: .unrestricted)
            let sends = Array(try batch(emulator).prefix(3))
            let outcomes = Mutex<[DeliveryOutcome]>([])
            let context = SendBatchContext(now: Date(), deadline: .now + .seconds(1.5), timeout: .seconds(1.5))
            await sender.send(batch: sends, context: context) { _, outcome in outcomes.withLock { $0.append(outcome) } }
            let ended = outcomes.withLock { $0 }
            #expect(ended.count == 3)
            #expect(ended.allSatisfy { if case .retry(.deadlineExceeded, let detail, _) = $0 { detail["deadline_s"] == .double(1.5) } else { false } })
        }
    }

    /// Answers refusing the provider token (a key the emulator does not know: InvalidProviderToken) are judged
    /// where they arrive and kept for a resend alone with the replaced token; each delivery still ends once,
    /// as the one-delivery path ends it.
    @Test func refusedTokensAreSentAgainAloneAndEndOnce() async throws {
        try await CacheBoundsTests.withEmulatorClient { emulator, client in
            let settings = JSONValue.object([
                "team_id": .string(EmulatorHarness.teamID), "key_id": "UNKNOWNKEY",
                "private_key": .string(try P256PrivateKey.generate().pkcs8PEM), "topic": "dev.pushizo.test",
            ]).jsonText
            let message = try NotificationMessage(json: ["contents": ["en": "hi"]])
            let app = UUID()
            let sends = (0..<3).map { index in
                var claimed = bounds.delivery(app: app, settings: settings, platform: "ios", token: "a3" + String(repeating: "\(index)", count: 62))
                claimed.channelEndpoint = emulator.endpoint
                return BatchedSend(delivery: claimed, message: message)
            }
            let sender = APNsSender(client: client, requestTimeout: .seconds(300), logger: quietLogger, egressPolicy: .unrestricted)
            let (declined, got) = await Self.sendCollecting(sends, through: sender)
            #expect(declined.isEmpty)
            #expect(sends.indices.map { got[$0]?.map(Self.shape) ?? [] } == Array(repeating: ["channel/invalid_provider_token"], count: 3))
        }
    }

    /// A batch spanning several credentials (their tokens fetched side by side): each credential's deliveries
    /// get that credential's answer, the emulator's own key `sent`, keys it does not know
    /// `invalid_provider_token`, and each delivery ends once.
    @Test func aBatchOfSeveralCredentialsEndsEachDeliveryWithItsOwnAnswer() async throws {
        try await CacheBoundsTests.withEmulatorClient { emulator, client in
            let message = try NotificationMessage(json: ["contents": ["en": "hi"]])
            var settings = [emulator.channelSettings]
            for index in 0..<2 {
                settings.append(JSONValue.object([
                    "team_id": .string(EmulatorHarness.teamID), "key_id": .string("OTHERKEY\(index)"),
                    "private_key": .string(try P256PrivateKey.generate().pkcs8PEM), "topic": "dev.pushizo.test",
                ]).jsonText)
            }
            var sends: [BatchedSend] = []
            for round in 0..<2 {
                for (app, setting) in settings.enumerated() {
                    var claimed = bounds.delivery(
                        app: UUID(), settings: setting, platform: "ios", token: "a3" + String(repeating: "\(round)\(app)", count: 31))
                    claimed.channelEndpoint = emulator.endpoint
                    sends.append(BatchedSend(delivery: claimed, message: message))
                }
            }
            let sender = APNsSender(client: client, requestTimeout: .seconds(300), logger: quietLogger, egressPolicy: .unrestricted)
            let (declined, got) = await Self.sendCollecting(sends, through: sender)
            #expect(declined.isEmpty)
            let expected = ["sent", "channel/invalid_provider_token", "channel/invalid_provider_token"]
            #expect(sends.indices.map { got[$0]?.map(Self.shape) ?? [] } == (expected + expected).map { [$0] })
        }
    }

    /// A batch whose task is cancelled while its answers are held back (5 s): the send returns, and every
    /// delivery ends exactly once although both the cancellation and the client report the unanswered ones
    /// (in the second case the client's report comes from its loop shutting down).
    @Test(arguments: [false, true]) func aCancelledBatchEndsEachDeliveryOnce(loopShutDown: Bool) async throws {
        try await CacheBoundsTests.withEmulatorClient(latency: 5) { emulator, client in
            let sender = APNsSender(client: client, requestTimeout: .seconds(30), logger: quietLogger, egressPolicy: .unrestricted)
            let sends = Array(try batch(emulator).prefix(3))
            let outcomes = Mutex<[Int: [DeliveryOutcome]]>([:])
            let context = SendBatchContext(now: Date(), deadline: .now + .seconds(30), timeout: .seconds(30))
            let sending = Task {
                await sender.send(batch: sends, context: context) { index, outcome in
                    outcomes.withLock { $0[index, default: []].append(outcome) }
                }
            }
            // Time for the requests to reach the emulator's streams (its latency holds them there); were they
            // not there yet, each would still have to end once.
            try await Task.sleep(for: .milliseconds(500))
            if loopShutDown { client.eventLoop.shutdown() }
            sending.cancel()
            _ = await sending.value
            let got = outcomes.withLock { $0 }
            #expect(got.count == 3 && got.values.allSatisfy { $0.count == 1 })
            #expect(got.values.allSatisfy { Self.shape($0[0]) != "sent" })
        }
    }
}
