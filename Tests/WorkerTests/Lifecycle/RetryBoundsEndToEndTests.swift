import DeliveryCore
import Foundation
import Postgres
import Testing
@testable import Worker

/// A provider that never answers: its deliveries retry without spending attempts, yet they end, and only
/// the first few retries write an event.
@Suite("Retries that spend no attempt end", .serialized)
struct RetryBoundsEndToEndTests {
    @Test func anUnreachableProviderEndsInRetriesExhaustedWithBoundedEvents() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            try await EmulatorHarness.with { emulator in
                let subscription = try await onThread { try Seed.deliveryToAnUnreachableProvider(url, emulator: emulator) }
                let runtime = try WorkerRuntime(
                    configuration: try emulator.workerConfiguration(
                        databaseURL: url, extra: [
                            "PUSHIZO_MAX_UNCOUNTED_RETRIES": "8", "PUSHIZO_MAX_ATTEMPTS": "2",
                            // The pool backs off reconnecting to a refusing origin; queued requests then wait
                            // this long before they count as unsent.
                            "PUSHIZO_REQUEST_TIMEOUT": "1",
                            // Not the default of twice the request timeout (2 s): a starved test machine can hold
                            // an exchange that long, and its `deadline_exceeded` retry spends an attempt.
                            "PUSHIZO_DELIVERY_TIMEOUT": "30",
                        ]),
                    logger: quietLogger)
                try await runUntilDrained(runtime)
                let database = PostgresClient(connectionString: url, maximumConnections: 1)
                let events = try await database.query(
                    """
                    SELECT event || '/' || reason AS e, attempt, detail->>'uncounted_retries' AS n
                    FROM delivery_events WHERE subscription_id = $1 ORDER BY id
                    """, [subscription])
                let retrying = Array(repeating: "retrying/provider_unreachable", count: CompletionFactory.retryingEventsWithoutAttempt)
                #expect(events.map { $0["e"] ?? "" } == retrying + ["failed/retries_exhausted"])
                #expect(events.last?["n"] == "8")
                #expect(events.allSatisfy { $0["attempt"] == "0" || $0["attempt"] == "1" })
                #expect(try await database.query("SELECT count(*) AS n FROM deliveries")[0]["n"] == "0")
                await database.shutdown()
            }
        }
    }
}

extension Seed {
    /// An app whose APNs channel points at a port nothing listens on (connection refused:
    /// `provider_unreachable`, no attempt spent) and one notification to one subscription; returns the
    /// subscription.
    static func deliveryToAnUnreachableProvider(_ url: String, emulator: EmulatorHarness) throws -> UUID {
        let seed = try Seed(url)
        try seed.app(channelSettings: emulator.channelSettings, endpoint: "https://127.0.0.1:9")
        let subscription = try seed.subscription()
        try seed.notification(target: #"{"include_subscription_ids": ["\#(subscription)"]}"#)
        return subscription
    }
}
