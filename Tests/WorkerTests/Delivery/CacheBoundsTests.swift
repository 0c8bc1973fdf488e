import DeliveryCore
import Emulator
import Foundation
import HTTP2
import Providers
import PushCrypto
import Synchronization
import Testing
@testable import Worker

/// The senders' per-tenant caches stay within their bounds however many apps, keys and origins arrive, and
/// an evicted entry is rebuilt on its next use.
@Suite("Bounded channel caches and token managers")
struct CacheBoundsTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    func delivery(app: UUID, settings: String, platform: String = "web", token: String = "t") -> ClaimedDelivery {
        ClaimedDelivery(
            id: 1, fence: 1, attempt: 1, notificationID: UUID(), subscriptionID: UUID(), appID: app,
            apnsID: UUID(), messageVersion: "1", campaignID: nil, notificationStatus: "expanded",
            notificationStart: Self.now, platform: platform, token: token, apnsEnvironment: nil, language: "en",
            timezone: nil, country: nil, subscriptionStatus: "active", tokenUpdatedAt: Self.now, userTagsJSON: nil,
            defaultLanguage: "en", defaultTimezone: nil, signingKey: [1], channelProvider: platform == "web" ? "webpush" : "apns",
            channelSettingsJSON: settings, channelEndpoint: nil, channelPausedUntil: nil)
    }

    /// The emulator and an HTTP/2 client trusting its CA (on a loop of its own, `client.eventLoop`).
    /// - Parameter latency: seconds the emulator holds each answer back (see `EmulatorHarness.with`).
    static func withEmulatorClient(
        latency: Double = 0, _ body: @Sendable (EmulatorHarness, HTTP2Client) async throws -> Void
    ) async throws {
        try await EmulatorHarness.with(latency: latency) { emulator in
            let loop = try HTTP2EventLoop(name: "bounds-io")
            let client = HTTP2Client(eventLoop: loop, tls: TLSClientConfiguration(trustRoots: .pemFile(emulator.caFile)))
            do {
                try await body(emulator, client)
            } catch {
                await client.shutdown()
                loop.shutdown()
                throw error
            }
            await client.shutdown()
            loop.shutdown()
        }
    }

    @Test func theChannelCacheKeepsAtMostItsCapacityOfApps() throws {
        let cache = ChannelCache<Int>(capacity: 4)
        let builds = BuildCounter()
        let apps = (0..<100).map { _ in UUID() }
        for (index, app) in apps.enumerated() {
            _ = try cache.channel(for: delivery(app: app, settings: "{}")) { _, _ in builds.next(index) }
        }
        #expect(cache.count == 4)
        #expect(builds.count == 100)
        // The most recent app is served from the cache; an evicted one is built again.
        #expect(try cache.channel(for: delivery(app: apps[99], settings: "{}")) { _, _ in builds.next(-1) } == 99)
        #expect(try cache.channel(for: delivery(app: apps[0], settings: "{}")) { _, _ in builds.next(-2) } == -2)
        // New settings for a cached app rebuild it (a corrected key takes effect at once).
        #expect(try cache.channel(for: delivery(app: apps[0], settings: #"{"a":1}"#)) { _, _ in builds.next(-3) } == -3)
        #expect(cache.count == 4)
    }

    /// Small settings are remembered as text, large ones by digest: either way the same settings are served from
    /// the cache and any change (one byte, or the endpoint) rebuilds the channel.
    @Test(arguments: [64, ChannelCache<Int>.maximumTextBytes + 1])
    func changedSettingsRebuildTheChannelWhateverTheirSize(size: Int) throws {
        let cache = ChannelCache<Int>(capacity: 4)
        let builds = BuildCounter()
        let app = UUID()
        let padding = String(repeating: "x", count: size - #"{"k":""}"#.utf8.count)
        let settings = #"{"k":"\#(padding)"}"#
        #expect(settings.utf8.count == size)
        let changed = #"{"k":"\#(padding.dropLast())y"}"#
        #expect(try cache.channel(for: delivery(app: app, settings: settings)) { _, _ in builds.next(1) } == 1)
        #expect(try cache.channel(for: delivery(app: app, settings: settings)) { _, _ in builds.next(2) } == 1)
        #expect(try cache.channel(for: delivery(app: app, settings: changed)) { _, _ in builds.next(3) } == 3)
        var moved = delivery(app: app, settings: changed)
        moved.channelEndpoint = "https://push.example.com"
        #expect(try cache.channel(for: moved) { _, _ in builds.next(4) } == 4)
        #expect(builds.count == 3)
    }

    @Test func concurrentFirstUsesOfAnAppAllGetTheOneCachedChannel() async throws {
        // A channel carries the app's fault evidence: deliveries that race to build it must still share one.
        final class Built: Sendable {}
        let cache = ChannelCache<Built>(capacity: 8)
        let app = UUID()
        let delivery = delivery(app: app, settings: #"{"k": 1}"#)
        let instances = await withTaskGroup(of: ObjectIdentifier.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    let channel = try! cache.channel(for: delivery) { _, _ in
                        // Slow enough that the first uses overlap.
                        Thread.sleep(forTimeInterval: 0.01)
                        return Built()
                    }
                    return ObjectIdentifier(channel)
                }
            }
            var seen = Set<ObjectIdentifier>()
            for await id in group { seen.insert(id) }
            return seen
        }
        #expect(instances.count == 1)
        #expect(cache.count == 1)
    }

    @Test func sharedInstancesKeepOnePerKeyWithinTheirCapacity() {
        let shared = SharedInstances<BuildCounter>(capacity: 3)
        let first = shared.value(forKey: "k0") { BuildCounter() }
        #expect(shared.value(forKey: "k0") { BuildCounter() } === first)
        for index in 1..<50 { _ = shared.value(forKey: "k\(index)") { BuildCounter() } }
        #expect(shared.count == 3)
        #expect(shared.value(forKey: "k0") { BuildCounter() } !== first)
    }

    @Test func aVAPIDManagerKeepsAtMostItsBoundOfOrigins() throws {
        let manager = VAPIDTokenManager(privateKey: try P256PrivateKey.generate(), subject: try VAPIDSubject("mailto:a@b.example"))
        let first = try manager.token(origin: "https://push0.example")
        for index in 0..<1000 { _ = try manager.token(origin: "https://push\(index).example") }
        #expect(manager.cachedOrigins == VAPIDTokenManager.maximumCachedOrigins)
        // The first origin was evicted: it gets a token again, signed afresh (ES256 signatures differ).
        #expect(try manager.token(origin: "https://push0.example") != first)
        let recent = try manager.token(origin: "https://push999.example")
        #expect(try manager.token(origin: "https://push999.example") == recent)
    }

    /// Many apps with distinct VAPID subjects through a sender bounded to 4 channels and 2 managers: every
    /// push is still sent (evicted entries are rebuilt), and the caches never hold more than their bound.
    @Test func aBoundedWebPushSenderStillSendsForEveryApp() async throws {
        try await Self.withEmulatorClient { emulator, client in
            var bounds = CacheBounds()
            bounds.channels = 4
            bounds.vapidTokenManagers = 2
            let sender = WebPushSender(
                client: client, requestTimeout: .seconds(60), logger: quietLogger, egressPolicy: .unrestricted, bounds: bounds)
            let browser = try emulator.webSubscription("okay1")
            let message = try NotificationMessage(json: ["contents": ["en": "hi"]])
            let apps = (0..<12).map { _ in UUID() }
            for round in 0..<2 {
                for (index, app) in apps.enumerated() {
                    let settings = JSONValue.object([
                        "vapid_private_key": .string(emulator.vapidKey.pkcs8PEM), "subject": .string("mailto:app\(index)@b.example"),
                    ]).jsonText
                    var claimed = delivery(app: app, settings: settings, token: browser.endpoint(origin: emulator.endpoint))
                    claimed.webP256DH = browser.p256dh
                    claimed.webAuth = browser.auth
                    let outcome = await sender.sendOne(claimed, message: message, now: Date())
                    guard case .sent = outcome else {
                        Issue.record("round \(round) app \(index): \(outcome)")
                        continue
                    }
                    #expect(sender.channels.count <= 4)
                    #expect(sender.tokenManagers.count <= 2)
                }
            }
            #expect(emulator.webPush.acceptedMessages.count == 24)
        }
    }

    /// APNs token managers are bounded too; a refused provider token still pauses the channel at once.
    @Test func aBoundedAPNsSenderKeepsFewTokenManagers() async throws {
        try await Self.withEmulatorClient { emulator, client in
            var bounds = CacheBounds()
            bounds.channels = 3
            bounds.apnsTokenManagers = 2
            let sender = APNsSender(
                client: client, requestTimeout: .seconds(60), logger: quietLogger, egressPolicy: .unrestricted, bounds: bounds)
            let message = try NotificationMessage(json: ["contents": ["en": "hi"]])
            for index in 0..<6 {
                // Keys the emulator does not know: InvalidProviderToken, which names the credential.
                let settings = JSONValue.object([
                    "team_id": .string(EmulatorHarness.teamID), "key_id": .string("KEY\(index)ABCDEF"),
                    "private_key": .string(try P256PrivateKey.generate().pkcs8PEM), "topic": "dev.pushizo.test",
                ]).jsonText
                var claimed = delivery(app: UUID(), settings: settings, platform: "ios", token: String(repeating: "a", count: 64))
                claimed.channelEndpoint = emulator.endpoint
                let outcome = await sender.sendOne(claimed, message: message, now: Date())
                #expect(outcome.eventName == "retrying")
                guard case .channelError(.invalidProviderToken, _, _) = outcome else {
                    Issue.record("\(outcome)")
                    continue
                }
                #expect(sender.channels.count <= 3)
                #expect(sender.tokens.count <= 2)
            }
        }
    }
}

/// Counts builds; a class so instances have an identity.
final class BuildCounter: Sendable {
    private let builds = Mutex(0)
    var count: Int { builds.withLock { $0 } }
    func next(_ value: Int) -> Int {
        builds.withLock { $0 += 1 }
        return value
    }
}
