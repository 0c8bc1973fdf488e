// pushizo-bench: the client half of `make bench` (scripts/bench.sh drives it).
//
//   pushizo-bench transport URL --requests N --streams S --body FILE [--ca FILE] [--batch B | --submit B] [--tenants T]
//
// Sends N POSTs of FILE's bytes to URL over one HTTP/2 connection with S requests in flight, one `send` per
// request, and prints `requests_per_second=<r> failures=<f>`. With `--submit B` (B > 1) the requests go to the
// client the way the worker hands it claimed batches: B at a time (`submit`, one hand-off to the I/O thread per
// batch, each answer taken where it arrives, on the I/O thread, as the worker judges it), B more each time B
// have been answered, never more than S outstanding. With `--batch B` each of S/B lanes hands B requests at a time to the collecting
// `send([HTTP2Request], to:)` and waits for all of them before its next B. With `--tenants T` the requests carry
// `HTTP2Request.tenant`, one of T keys (by lane, or by hand-over with `--submit`), as the worker's name their app;
// without it they carry none.
//
//   pushizo-bench fetch URL [--max-body BYTES] [--max-header-list BYTES] [--ca FILE]
//
// Sends one empty POST with the client's default read bounds (or the caps given, to measure without them), prints
// `status=<n> body_bytes=<b>` or `error=<HTTP2Error code>`, then waits for standard input to close, so that a
// test can read this process's peak RSS (VmHWM in /proc/<pid>/status) while it is still alive.
import Foundation
import HTTP2
import Synchronization

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("pushizo-bench: \(message)\n".utf8))
    exit(2)
}

var arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "fetch", arguments.count >= 2 {
    await fetch(Array(arguments.dropFirst()))
    exit(0)
}
guard arguments.first == "transport", arguments.count >= 2 else {
    fail("usage: pushizo-bench transport URL --requests N --streams S --body FILE [--ca FILE] | fetch URL [--max-body BYTES] [--max-header-list BYTES] [--ca FILE]")
}
let url = arguments[1]
var options: [String: String] = [:]
var index = 2
while index + 1 < arguments.count {
    options[arguments[index]] = arguments[index + 1]
    index += 2
}
guard let requests = Int(options["--requests"] ?? "20000"), requests > 0 else { fail("bad --requests") }
guard let streams = Int(options["--streams"] ?? "100"), streams > 0 else { fail("bad --streams") }
guard let bodyPath = options["--body"], let body = FileManager.default.contents(atPath: bodyPath) else {
    fail("--body FILE is required and must be readable")
}
let origin: HTTP2Origin
do { origin = try HTTP2Origin(parsing: url) } catch { fail("\(error)") }
let path = URLComponents(string: url)?.path ?? "/"

let eventLoop = try HTTP2EventLoop(name: "bench-io")
var configuration = HTTP2ClientConfiguration()
configuration.maximumConnectionsPerOrigin = 1
let client = HTTP2Client(
    eventLoop: eventLoop, tls: TLSClientConfiguration(trustRoots: options["--ca"].map { .pemFile($0) } ?? .system),
    configuration: configuration)
let payload = Array(body)

// Warm up: connect and settle the connection before timing.
_ = try? await client.send(HTTP2Request(path: path.isEmpty ? "/" : path, body: payload), to: origin)

let submitted = max(1, Int(options["--submit"] ?? "1") ?? 1)
let batch = max(1, Int(options["--batch"] ?? "1") ?? 1)
let tenantKeys = (0..<max(0, Int(options["--tenants"] ?? "0") ?? 0)).map { HTTP2Tenant("00000000-0000-4000-8000-\(String(1_000_000_000_000 + $0))") }
/// The tenant of lane or hand-over `n`: nil without `--tenants`.
func tenant(_ n: Int) -> HTTP2Tenant? { tenantKeys.isEmpty ? nil : tenantKeys[n % tenantKeys.count] }
let start = ContinuousClock.now
let failures = await withTaskGroup(of: Int.self) { group in
    if submitted > 1 {
        // One task keeps up to S requests outstanding and hands over B more each time B have been answered,
        // as the worker claims and hands over a batch once enough of its in-flight deliveries have finished.
        group.addTask {
            // Answers are counted where they arrive, on the I/O thread, as the worker judges and completes them
            // there; the task is woken once per B answered (the worker's claim loop, once half a batch is
            // free), not once per burst.
            let (refills, refill) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .unbounded)
            let tally = Mutex((failed: 0, waiting: requests, sinceHandOver: 0))
            let answered: @Sendable ([HTTP2Answer]) -> Void = { burst in
                let (wake, done) = tally.withLock { tally -> (Int, Bool) in
                    var wake = 0
                    for answer in burst {
                        if let response = try? answer.result.get(), response.status < 500 {} else { tally.failed += 1 }
                        tally.waiting -= 1
                        tally.sinceHandOver += 1
                        if tally.sinceHandOver == submitted {
                            tally.sinceHandOver = 0
                            wake += 1
                        }
                    }
                    return (wake, tally.waiting == 0)
                }
                if done { refill.finish() } else { for _ in 0..<wake { refill.yield() } }
            }
            var left = requests
            var handOvers = 0
            func handOver(_ count: Int) {
                let count = min(count, left)
                guard count > 0 else { return }
                left -= count
                let request = HTTP2Request(path: path.isEmpty ? "/" : path, body: payload, tenant: tenant(handOvers))
                handOvers += 1
                _ = client.submit(Array(repeating: request, count: count), to: origin, answers: answered)
            }
            for _ in 0..<max(1, streams / submitted) { handOver(submitted) }
            for await _ in refills { handOver(submitted) }
            return tally.withLock { $0.failed }
        }
        var total = 0
        for await failed in group { total += failed }
        return total
    }
    if batch > 1 {
        // S streams in flight as S/B lanes of B requests; the last batch of a lane may be short.
        let lanes = max(1, streams / batch)
        for lane in 0..<lanes {
            group.addTask {
                var failed = 0
                var left = requests / lanes + (lane < requests % lanes ? 1 : 0)
                while left > 0 {
                    let count = min(batch, left)
                    left -= count
                    let results = await client.send(
                        Array(repeating: HTTP2Request(path: path.isEmpty ? "/" : path, body: payload, tenant: tenant(lane)), count: count),
                        to: origin)
                    for result in results {
                        if let response = try? result.get(), response.status < 500 { continue }
                        failed += 1
                    }
                }
                return failed
            }
        }
        var total = 0
        for await failed in group { total += failed }
        return total
    }
    let perTask = requests / streams
    let extra = requests % streams
    for lane in 0..<streams {
        group.addTask {
            var failed = 0
            for _ in 0..<(perTask + (lane < extra ? 1 : 0)) {
                do {
                    let response = try await client.send(
                        HTTP2Request(path: path.isEmpty ? "/" : path, body: payload, tenant: tenant(lane)), to: origin)
                    if response.status >= 500 { failed += 1 }
                } catch {
                    failed += 1
                }
            }
            return failed
        }
    }
    var total = 0
    for await failed in group { total += failed }
    return total
}
let elapsed = ContinuousClock.now - start
let seconds = elapsed / .seconds(1)
print(String(format: "requests_per_second=%.0f failures=%d", Double(requests) / seconds, failures))
await client.shutdown()
eventLoop.shutdown()

func fetch(_ arguments: [String]) async {
    var options: [String: String] = [:]
    var index = 1
    while index + 1 < arguments.count {
        options[arguments[index]] = arguments[index + 1]
        index += 2
    }
    let origin: HTTP2Origin
    do { origin = try HTTP2Origin(parsing: arguments[0]) } catch { fail("\(error)") }
    let path = URLComponents(string: arguments[0])?.path ?? "/"
    var configuration = HTTP2ClientConfiguration()
    if let text = options["--max-body"] {
        guard let bytes = Int(text), bytes > 0 else { fail("bad --max-body") }
        configuration.maximumResponseBodySize = bytes
    }
    if let text = options["--max-header-list"] {
        guard let bytes = Int(text), bytes > 0 else { fail("bad --max-header-list") }
        configuration.maximumResponseHeaderListSize = bytes
        configuration.maximumResponseHeaderCount = bytes
    }
    guard let eventLoop = try? HTTP2EventLoop(name: "fetch-io") else { fail("cannot start the event loop") }
    let client = HTTP2Client(
        eventLoop: eventLoop, tls: TLSClientConfiguration(trustRoots: options["--ca"].map { .pemFile($0) } ?? .system),
        configuration: configuration)
    let outcome: String
    do {
        let response = try await client.send(HTTP2Request(path: path.isEmpty ? "/" : path), to: origin)
        outcome = "status=\(response.status) body_bytes=\(response.body.count)"
    } catch let error as HTTP2Error {
        outcome = "error=\(error.code)"
    } catch {
        outcome = "error=\(error)"
    }
    // Unbuffered, so the waiting test sees the line at once.
    FileHandle.standardOutput.write(Data((outcome + "\n").utf8))
    while readLine() != nil {}
    await client.shutdown()
    eventLoop.shutdown()
}
