import Foundation
import Synchronization
import Testing
@testable import Postgres

@Suite("PostgresCanceller")
struct CancellerTests {
    /// A statement running on one thread is cancelled from another; the connection stays usable.
    @Test func aRunningStatementIsCancelledFromAnotherThread() async throws {
        try await TestDatabase.withFreshDatabase { url in
            try await onThread {
                let connection = try PostgresConnection(connectionString: url)
                let watcher = try PostgresConnection(connectionString: url)
                let canceller = try #require(connection.makeCanceller())
                let outcome = Mutex<String?>(nil)
                let done = DispatchSemaphore(value: 0)
                // The connection is used by the sleeping thread alone until `done`.
                nonisolated(unsafe) let running = connection
                let started = Date()
                Thread {
                    do {
                        _ = try running.query("SELECT pg_sleep(30)")
                        outcome.withLock { $0 = "finished" }
                    } catch let error as PostgresError {
                        outcome.withLock { $0 = error.sqlState ?? "no SQLSTATE" }
                    } catch {
                        outcome.withLock { $0 = "\(error)" }
                    }
                    done.signal()
                }.start()
                // Until the server runs the sleep (a cancel before it would find nothing to cancel).
                for _ in 0..<200 {
                    let rows = try watcher.query(
                        "SELECT count(*) AS n FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'")
                    if try rows[0].decode(Int.self, "n") > 0 { break }
                    Thread.sleep(forTimeInterval: 0.05)
                }
                #expect(canceller.cancel())
                done.wait()
                #expect(outcome.withLock { $0 } == "57014")
                #expect(Date().timeIntervalSince(started) < 20)
                #expect(try connection.query("SELECT 1 AS one")[0]["one"] == "1")
            }
        }
    }
}
