import Foundation
import Synchronization
@testable import HTTP2

/// A latch tests open once; waiters resume when it opens.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { s -> Bool in
                if s.open { return true }
                s.waiters.append(c)
                return false
            }
            if resumeNow { c.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.open = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.resume() }
    }
}

func temporaryDirectory(_ label: String) -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("pushizo-http2-\(label)-\(UUID().uuidString)").path
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Echo-ish handler used by several tests: status 200, `x-path` = path, body = request body.
let echoHandler: @Sendable (HTTP2ServerRequest) async -> HTTP2ServerResponse = { request in
    HTTP2ServerResponse(status: 200, headers: [HTTP2Header("x-path", request.path), HTTP2Header("x-method", request.method),
                                               HTTP2Header("x-authority", request.authority)], body: request.body)
}

/// Starts an external program and kills it when the returned object is stopped.
final class ExternalProcess: @unchecked Sendable {
    let process = Process()
    init(_ path: String, _ arguments: [String], directory: String? = nil) throws {
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = Pipe()
        try process.run()
    }
    func stop() {
        // SIGKILL: the test runner's blocked-signal mask is inherited, so SIGTERM may never arrive.
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

/// Waits (up to ~10 s) until something accepts TCP connections on 127.0.0.1:port.
func waitForListener(port: Int) async throws {
    for _ in 0..<200 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        close(fd)
        if rc == 0 { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    throw HTTP2Error(.connectFailed, "nothing listened on port \(port)")
}

/// A TCP port that was free a moment ago (bind to port 0, read it back, close).
func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let rc = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 ? getsockname(fd, $0, &length) : -1 }
    }
    guard rc == 0 else { throw HTTP2Error(.setupFailed, "no free port") }
    return Int(UInt16(bigEndian: address.sin_port))
}
