import Foundation
import Postgres
import Testing
@testable import Worker

/// ``DatabaseStartWait`` as a value: which first-contact errors end the start (exit 78) and which are waited out,
/// and how often a wait is logged, on a clock the test drives.
@Suite("waiting for PostgreSQL at start")
struct DatabaseStartWaitTests {
    static func refusal(_ sqlState: String) -> PostgresError {
        PostgresError(code: .connectionFailed, message: "connection to server failed: refused", sqlState: sqlState)
    }

    @Test(arguments: ["28P01", "28000", "3D000", "42501"])
    func refusalsThatNeedAnOperatorEndTheStart(sqlState: String) {
        var wait = DatabaseStartWait(key: .databaseURL)
        guard case .giveUp(let error) = wait.failed(Self.refusal(sqlState), now: .now) else {
            Issue.record("\(sqlState) was retried")
            return
        }
        #expect(error.key == "PUSHIZO_DATABASE_URL")
        #expect(error.problem.contains("connection to server failed: refused") && error.problem.contains(sqlState))
        #expect(wait.failures == 0)
    }

    @Test func aConnectionStringLibpqCannotParseEndsTheStart() {
        var wait = DatabaseStartWait(key: .listenDatabaseURL)
        let error = PostgresError(code: .invalidConnectionString, message: "invalid connection string: ...")
        guard case .giveUp(let refusal) = wait.failed(error, now: .now) else {
            Issue.record("retried")
            return
        }
        #expect(refusal.key == "PUSHIZO_LISTEN_DATABASE_URL")
    }

    /// Refused connections, timeouts, a server starting up or out of slots, a standby: waited out, each attempt
    /// reported to systemd on one line.
    @Test(arguments: [nil, "57P03", "53300", "08006", "25006", "57P01"] as [String?])
    func passingTroubleIsWaitedOut(sqlState: String?) {
        var wait = DatabaseStartWait(key: .databaseURL)
        let error = PostgresError(
            code: .connectionFailed,
            message: "connection to server at \"127.0.0.1\", port 1 failed: Connection refused\n\tIs the server running?\n",
            sqlState: sqlState)
        guard case .retry(let status, let log) = wait.failed(error, now: .now) else {
            Issue.record("\(sqlState ?? "no SQLSTATE") ended the start")
            return
        }
        #expect(log)
        #expect(status == "STATUS=waiting for PostgreSQL: connection to server at \"127.0.0.1\", port 1 failed: Connection refused Is the server running?")
        #expect(wait.failures == 1)
    }

    /// Every attempt gets a `STATUS=` line; the log gets the first and then one per ``DatabaseStartWait/logInterval``.
    @Test func logLinesAreBoundedInRate() {
        var wait = DatabaseStartWait(key: .databaseURL)
        let start = ContinuousClock.now
        let error = PostgresError(code: .connectionFailed, message: "timed out connecting after 10 s")
        var logged: [Int] = []
        for second in 0..<95 {
            guard case .retry(let status, let log) = wait.failed(error, now: start + .seconds(second)) else {
                Issue.record("ended the start")
                return
            }
            #expect(status.hasPrefix("STATUS=waiting for PostgreSQL: timed out"))
            if log { logged.append(second) }
        }
        #expect(logged == [0, 30, 60, 90])
        #expect(wait.failures == 95)
        #expect(wait.failuresSinceLog == 5)
    }

    @Test func aLongReasonIsCut() {
        var wait = DatabaseStartWait(key: .databaseURL)
        let error = PostgresError(code: .connectionFailed, message: String(repeating: "x", count: 1000))
        guard case .retry(let status, _) = wait.failed(error, now: .now) else {
            Issue.record("ended the start")
            return
        }
        #expect(status.count == "STATUS=waiting for PostgreSQL: ".count + DatabaseStartWait.statusReasonLimit)
        #expect(status.hasSuffix("..."))
    }
}
