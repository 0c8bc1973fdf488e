import Foundation
import MetricsServer
import Postgres
import Synchronization
import Testing

@testable import Worker

/// A schema refused while the worker runs (a migration headed `-- pushizo:oldest-worker` beyond this build applied
/// by a newer release's `migrate`): `/readyz` turns 503, the refusal is reported once to the owner (which logs it),
/// and `pushizo_schema_compatible` goes from 1 to 0, against a real PostgreSQL.
@Suite("schema refused while running")
struct SchemaRefusalWhileRunningTests {
    @Test func theFirstRefusalIsReportedOnceAndTheGaugeFalls() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let refusing = Mutex(false)
            let refusals = Mutex<[String]>([])
            let metrics = WorkerMetrics()
            let probes = WorkerProbes(
                watchdog: nil, loops: [], ioThread: LoopHeartbeat(name: "io"), probeIOThread: { _ in false },
                database: ListenerDatabase(connectionString: url, poolerMode: .none), isStopping: { false },
                verifySchema: { _ in
                    if refusing.withLock({ $0 }) {
                        throw ConfigurationError(key: "PUSHIZO_DATABASE_URL", problem: "0031_contract.sql needs workers built with migration 0031 or later")
                    }
                },
                metrics: metrics, onSchemaRefused: { reason in refusals.withLock { $0.append(reason) } })
            probes.schemaVerified()
            probes.loopReached()
            #expect(metrics.registry.render().contains("\npushizo_schema_compatible 1\n"))
            #expect(probes.readiness().status == 200)

            refusing.withLock { $0 = true }
            // A failed round trip since the last judgement makes the next one due after ``contactRecheck``
            // instead of ``schemaRecheck``; each wait passes that bound, whatever the load.
            for _ in 0..<2 {
                probes.loopFailed()
                try await Task.sleep(for: ReadinessState.contactRecheck + .milliseconds(200))
                probes.loopReached()
                let page = probes.readiness()
                #expect(page.status == 503)
                #expect(page.body.contains("0031_contract.sql needs workers"))
            }
            #expect(refusals.withLock { $0 } == ["0031_contract.sql needs workers built with migration 0031 or later"])
            #expect(metrics.registry.render().contains("\npushizo_schema_compatible 0\n"))
        }
    }

    /// The refusal's words are returned by the judgement that first finds them, not by the next that finds the same.
    @Test func readinessStateReturnsANewRefusalOnce() {
        var state = ReadinessState()
        let start = ContinuousClock.now
        #expect(state.schemaChecked(.current, at: start) == nil)
        #expect(state.schemaChecked(.refused("too old"), at: start + .seconds(60)) == "too old")
        #expect(state.schemaChecked(.refused("too old"), at: start + .seconds(65)) == nil)
        #expect(state.schemaChecked(nil, at: start + .seconds(70)) == nil)
        #expect(state.schemaChecked(.refused("behind"), at: start + .seconds(75)) == "behind")
    }
}
