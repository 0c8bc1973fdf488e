import Foundation
import Postgres
import SocketTestSupport
import Testing
@testable import Worker

/// The status page and `GET /readyz` of a fleet: two real `pushizo-worker run` processes on one PostgreSQL, each
/// with its listener. Any worker's page shows the whole fleet by its heartbeats, and a worker stopped cleanly
/// shows as stopped (not stale) on the other's page while the other stays ready. States are polled, never timed:
/// each wait has a hang guard only (``ProbesEndToEndTests/waitFor(_:_:)``).
@Suite("The status pages and probes of a fleet of two workers", .serialized)
struct FleetPagesEndToEndTests {
    /// The state (`live`, `stale`, `stopped`) of each worker process on a status page, by pid: the page's
    /// workers table puts the state, the host and the pid in its first three cells.
    static func states(_ page: String) -> [Int32: String] {
        let expression = try! NSRegularExpression(pattern: #"<th scope="row">(live|stale|stopped)</th><td>[^<]*</td><td>(\d+)</td>"#)
        var states: [Int32: String] = [:]
        for match in expression.matches(in: page, range: NSRange(page.startIndex..., in: page)) {
            guard let state = Range(match.range(at: 1), in: page), let pid = Range(match.range(at: 2), in: page),
                let number = Int32(page[pid])
            else { continue }
            states[number] = String(page[state])
        }
        return states
    }

    @Test func eachPageListsBothWorkersAndTheSurvivorShowsTheOtherStopped() async throws {
        try await TestDatabase.withMigratedDatabase { url in
            let (stoppingPort, survivingPort) = (try freePort(), try freePort())
            let stopping = try WorkerHeartbeatEndToEndTests.startWorker(
                url, name: "w-stopping", extra: ["PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(stoppingPort)"])
            let surviving = try WorkerHeartbeatEndToEndTests.startWorker(
                url, name: "w-surviving", extra: ["PUSHIZO_METRICS_LISTEN": "127.0.0.1:\(survivingPort)"])
            defer {
                for process in [stopping, surviving] where process.isRunning { kill(process.processIdentifier, SIGKILL) }
            }
            let pids = [stopping.processIdentifier, surviving.processIdentifier]
            let (stoppingBase, survivingBase) = ("http://127.0.0.1:\(stoppingPort)", "http://127.0.0.1:\(survivingPort)")

            // Both pages list both workers live; both workers are ready.
            for base in [stoppingBase, survivingBase] {
                let page = try await ProbesEndToEndTests.waitFor(base + "/") { answer in
                    pids.allSatisfy { Self.states(answer.body)[$0] == "live" }
                }
                #expect(pids.allSatisfy { Self.states(page.body)[$0] == "live" }, "\(base): \(page.body)")
                let ready = try await ProbesEndToEndTests.waitFor(base + "/readyz") { $0.status == 200 }
                #expect(ready.status == 200 && ready.body == "ok\n", "\(base): \(ready.body)")
            }

            // One stopped with SIGTERM: a clean stop, marked in its heartbeat row before it exits.
            kill(stopping.processIdentifier, SIGTERM)
            try await onThread { stopping.waitUntilExit() }
            #expect(stopping.terminationReason == .exit && stopping.terminationStatus == 0)
            let after = try await ProbesEndToEndTests.waitFor(survivingBase + "/") { answer in
                Self.states(answer.body)[stopping.processIdentifier] == "stopped"
            }
            let states = Self.states(after.body)
            #expect(states[stopping.processIdentifier] == "stopped", "\(after.body)")
            #expect(states[surviving.processIdentifier] == "live", "\(after.body)")
            // The other's stop is none of the survivor's readiness.
            let ready = try await ProbesEndToEndTests.fetch(survivingBase + "/readyz")
            #expect(ready.status == 200 && ready.body == "ok\n", "\(ready.body)")

            surviving.terminate()
            try await onThread { surviving.waitUntilExit() }
            #expect(surviving.terminationStatus == 0)
        }
    }
}
