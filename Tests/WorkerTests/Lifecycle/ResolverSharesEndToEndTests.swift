import Emulator
import Foundation
@testable import HTTP2
import Postgres
import SocketTestSupport
import Synchronization
import Testing
import UUIDText
@testable import Worker

/// Web Push names whose DNS never answers, with the real worker, PostgreSQL, the emulator over TLS and the real
/// `getaddrinfo`: the worker's resolvers ask a name server on 127.0.0.1 that reads every query and answers none
/// (names in /etc/hosts, such as `localhost`, never reach it).
@Suite("Resolver shares end to end", .serialized)
struct ResolverSharesEndToEndTests {
    /// One app's 200 subscriptions at names that never answer (150 under one registrable domain, 50 under as many
    /// others) hold 8 lookups, its share, and no more; another app's 20 pushes to a push service the worker has no
    /// connection to yet are all sent while every one of those lookups is still unanswered.
    @Test func anAppsNamesThatNeverAnswerDoNotHoldUpAnotherAppsPushes() async throws {
        let dns = try SilentNameServer()
        defer { dns.stop() }
        let lookup: @Sendable (String, Int) -> Result<[SocketAddress], HTTP2Error> = { host, port in
            dns.useOnThisThread(timeoutSeconds: 3600)
            return SocketAddress.resolve(host, port: port)
        }
        let resolvers = WorkerResolvers(
            providers: .shared, channelOverrides: HostResolver(limits: .untrustedNames, lookup: lookup),
            webPush: HostResolver(limits: .untrustedNames, lookup: lookup))
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let hostileApp = try await onThread {
                    let seed = try Seed(url)
                    try seed.app()
                    try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                    let names = (1...150).map { "h\($0).slow.example.org" } + (1...50).map { "push.d\($0).example" }
                    for (index, name) in names.enumerated() {
                        try seed.webSubscription(try emulator.webSubscription("okay-slow-\(index)"), origin: "https://\(name)")
                    }
                    _ = try seed.notification(target: #"{"all": true}"#)
                    return seed.appID
                }
                let hostileTenant = CanonicalUUIDText.format(hostileApp)
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(
                        databaseURL: url, extra: ["PUSHIZO_EXIT_WHEN_DRAINED": "false"]),
                    logger: quietLogger, resolvers: resolvers)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let probed = Mutex<[UUID]>([])
                try await runUntil(runtime, "the other app's pushes are sent") {
                    let probes = probed.withLock { $0 }
                    if probes.isEmpty {
                        // The hostile app's share is full and its lookups sit at the name server: now the probes.
                        guard resolvers.webPush.running(tenant: hostileTenant) == 8, dns.askedNames.count >= 8 else {
                            return false
                        }
                        let seeded = try await onThread {
                            let seed = try Seed(url)
                            try seed.app()
                            try seed.webPushChannel(settings: emulator.webPushChannelSettings)
                            let subscriptions = try (1...20).map { index in
                                try seed.webSubscription(
                                    try emulator.webSubscription("okay-probe-\(index)"), origin: emulator.endpoint)
                            }
                            _ = try seed.notification(target: #"{"all": true}"#)
                            return subscriptions
                        }
                        probed.withLock { $0 = seeded }
                        return false
                    }
                    let rows = try await database.query(
                        "SELECT count(*) AS n FROM delivery_events WHERE event = 'sent' AND subscription_id = ANY($1::uuid[])",
                        [probes])
                    return rows[0]["n"] == "20"
                }
                let probes = probed.withLock { $0 }
                #expect(probes.count == 20)
                #expect(emulator.webPush.acceptedMessages.count == 20)
                // Every lookup of the hostile app's names is still unanswered: 2 under example.org, 6 under others.
                let asked = dns.askedNames
                #expect(asked.count == 8, "\(asked.sorted())")
                #expect(asked.count { $0.hasSuffix(".slow.example.org") } == 2, "\(asked.sorted())")
                #expect(resolvers.webPush.running(tenant: hostileTenant) == 8)
                await database.shutdown()
            }
        }
    }
}
