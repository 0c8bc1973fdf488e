import Testing

@testable import Worker

/// `GET /readyz`'s decision, driven by instants as values (no clock, no database).
@Suite("Readiness state")
struct ReadinessStateTests {
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int(seconds * 1000)) }

    static let behind =
        "the database lacks 1 migration(s) this worker (0.9.0) needs: 0029_worker_heartbeats.sql; run `pushizo-worker migrate` with this release's migrations first"

    @Test func notReadyUntilTheStartCheckAndTheLoopsReachTheDatabase() {
        var state = ReadinessState()
        #expect(
            state.verdict(now: at(0))
                == .failing([
                    "database: not reached yet",
                    "migrations: not checked yet (the worker checks them before its first claim)",
                ]))
        // The start-up check judges the schema first; a probe asks nothing meanwhile.
        #expect(!state.checksDue(now: at(0)).any)
        state.loopFailed(at: at(0.5))
        #expect(state.verdict(now: at(1)).body.hasPrefix("database: not reached yet; the last attempt failed 0.5 s ago\n"))
        state.schemaChecked(.current, at: at(5))
        state.loopReached(at: at(5.5))
        #expect(state.verdict(now: at(6)) == .healthy)
        #expect(state.verdict(now: at(6)).httpStatus == 200 && state.verdict(now: at(6)).body == "ok\n")
        // A current schema is judged again once a minute.
        #expect(!state.checksDue(now: at(30)).schema)
        #expect(state.checksDue(now: at(65)).schema)
    }

    @Test func aFailedRoundTripAfterTheLastSuccessMakesItUnready() {
        var state = ReadinessState()
        state.schemaChecked(.current, at: at(0))
        state.loopReached(at: at(1))
        #expect(state.verdict(now: at(2)) == .healthy)
        state.loopFailed(at: at(3))
        let verdict = state.verdict(now: at(4))
        #expect(verdict == .failing(["database: unreachable; the last round trip failed 1.0 s ago, the last success was 3.0 s ago"]))
        #expect(verdict.httpStatus == 503)
        state.loopReached(at: at(5))
        #expect(state.verdict(now: at(5)) == .healthy)
    }

    /// The loops' news is believed while recent; past ``ReadinessState/staleAfter`` the owner checks for itself, at
    /// most every few seconds however often it is probed.
    @Test func staleNewsIsCheckedAtABoundedRate() {
        var state = ReadinessState()
        state.schemaChecked(.current, at: at(0))
        state.loopReached(at: at(0))
        #expect(!state.checksDue(now: at(29)).contact)
        #expect(state.checksDue(now: at(30)).contact)
        #expect(state.verdict(now: at(30)) == .failing(["database: no round trip for 30 s"]))
        state.contactChecked(succeeded: true, at: at(30))
        #expect(state.verdict(now: at(31)) == .healthy)
        #expect(!state.checksDue(now: at(31)).contact)
        // A failed check is news too: not ready, and checked again once it is stale in turn.
        state.contactChecked(succeeded: false, at: at(61))
        #expect(state.verdict(now: at(62)) != .healthy)
        #expect(!state.checksDue(now: at(62)).contact)
        #expect(state.checksDue(now: at(91)).contact)
    }

    @Test func aStopRequestMakesItUnreadyAndStopsTheChecks() {
        var state = ReadinessState()
        state.schemaChecked(.current, at: at(0))
        state.loopReached(at: at(0))
        state.stopping = true
        #expect(state.verdict(now: at(1)) == .failing(["stopping: finishing in-flight sends, no new work"]))
        #expect(!state.checksDue(now: at(100)).any)
    }

    /// After an outage (perhaps a failover to a server behind a migration) a current schema is judged again as soon
    /// as a refused one; a judgement that could not reach the database leaves what was known.
    @Test func anOutageBringsTheSchemaCheckForwardAndARefusalIsShown() {
        var state = ReadinessState()
        state.schemaChecked(.current, at: at(0))
        state.loopReached(at: at(0))
        #expect(!state.checksDue(now: at(10)).schema)
        state.loopFailed(at: at(10))
        #expect(state.checksDue(now: at(10)).schema)
        state.schemaChecked(nil, at: at(10))
        #expect(state.schema == .current)
        #expect(!state.checksDue(now: at(12)).schema)
        #expect(state.checksDue(now: at(15)).schema)
        state.loopReached(at: at(16))
        state.schemaChecked(.refused(Self.behind), at: at(16))
        #expect(state.verdict(now: at(17)) == .failing(["migrations: " + Self.behind]))
        // A refused schema is judged again every few seconds, not on every probe.
        #expect(!state.checksDue(now: at(18)).schema)
        #expect(state.checksDue(now: at(21)).schema)
    }
}
