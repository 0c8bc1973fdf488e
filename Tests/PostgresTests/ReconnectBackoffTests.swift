import Testing
@testable import Postgres

/// ``PostgresReconnectBackoff`` as a value: delays from fixed jitter, no sockets, no clock.
@Suite("Reconnect backoff")
struct ReconnectBackoffTests {
    @Test func unavailableDoublesFromATenthOfASecondToFiveSeconds() {
        var backoff = PostgresReconnectBackoff()
        #expect(backoff.delay(jitter: 1) == .zero)
        let whole = (1...8).map { _ in backoff.failed(.unavailable, jitter: 1) }
        #expect(whole == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800),
                          .milliseconds(1600), .milliseconds(3200), .seconds(5), .seconds(5)])
    }

    @Test func crowdedDoublesFromOneSecondToSixtySeconds() {
        var backoff = PostgresReconnectBackoff()
        let whole = (1...8).map { _ in backoff.failed(.crowded, jitter: 1) }
        #expect(whole == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(32), .seconds(60), .seconds(60)])
    }

    @Test func jitterSpreadsEachDelayOverItsUpperHalf() {
        var low = PostgresReconnectBackoff()
        var high = PostgresReconnectBackoff()
        for _ in 1...3 {
            let shortest = low.failed(.crowded, jitter: 0)
            let longest = high.failed(.crowded, jitter: 1)
            #expect(shortest * 2 == longest)
        }
        // Out-of-range jitter is clamped.
        #expect(low.delay(jitter: -3) == .seconds(2))
        #expect(low.delay(jitter: 7) == .seconds(4))
    }

    @Test func successStartsOverAndTheLatestCauseDecidesThePolicy() {
        var backoff = PostgresReconnectBackoff()
        _ = backoff.failed(.unavailable, jitter: 1)
        _ = backoff.failed(.unavailable, jitter: 1)
        #expect(backoff.failed(.crowded, jitter: 1) == .seconds(4))
        #expect(backoff.failed(.unavailable, jitter: 1) == .milliseconds(800))
        backoff.succeeded()
        #expect(backoff.failures == 0)
        #expect(backoff.cause == nil)
        #expect(backoff.failed(.unavailable, jitter: 1) == .milliseconds(100))
    }

    @Test func causeIsCrowdedForInsufficientResourcesOnly() {
        #expect(PostgresReconnectBackoff.cause(of: PostgresError(code: .connectionFailed, message: "", sqlState: "53300")) == .crowded)
        #expect(PostgresReconnectBackoff.cause(of: PostgresError(code: .connectionFailed, message: "", sqlState: "53200")) == .crowded)
        #expect(PostgresReconnectBackoff.cause(of: PostgresError(code: .connectionFailed, message: "", sqlState: "57P03")) == .unavailable)
        #expect(PostgresReconnectBackoff.cause(of: PostgresError(code: .connectionFailed, message: "no state")) == .unavailable)
        #expect(PostgresReconnectBackoff.cause(of: CancellationError()) == .unavailable)
    }

    @Test func connectErrorsGiveUpTheirSQLState() {
        let verbose = """
            connection to server on socket "/tmp/.s.PGSQL.5432" failed: FATAL:  53300: sorry, too many clients already
            LOCATION:  InitProcess, proc.c:363
            """
        let split = PostgresConnection.splitSQLState(verbose)
        #expect(split.sqlState == "53300")
        #expect(split.message == #"connection to server on socket "/tmp/.s.PGSQL.5432" failed: FATAL:  sorry, too many clients already"#)
        let plain = PostgresConnection.splitSQLState("connection to server at \"db\" (10.0.0.1), port 5432 failed: session is read-only")
        #expect(plain.sqlState == nil)
        #expect(plain.message.hasSuffix("session is read-only"))
    }

    @Test func sessionLevelErrorsAreNeverTheRowsFault() {
        for state in ["25006", "57014", "55P03", "40001", "40P01", "53300", "57P01", "58030", "08006"] {
            #expect(PostgresError(code: .queryFailed, message: "", sqlState: state).isSessionLevel, "\(state)")
        }
        for state in ["22008", "23505", "42P01"] {
            #expect(!PostgresError(code: .queryFailed, message: "", sqlState: state).isSessionLevel, "\(state)")
        }
    }
}
