import Foundation
import SocketTestSupport
import Synchronization
@testable import HTTP2

/// Echo-ish handler used by several tests: status 200, `x-path` = path, body = request body.
let echoHandler: @Sendable (HTTP2ServerRequest) async -> HTTP2ServerResponse = { request in
    HTTP2ServerResponse(status: 200, headers: [HTTP2Header("x-path", request.path), HTTP2Header("x-method", request.method),
                                               HTTP2Header("x-authority", request.authority)], body: request.body)
}

extension HTTP2ClientConfiguration {
    /// For tests that move megabytes on purpose (flow control, TLS records): response bodies up to 8 MiB.
    static var largeBodies: HTTP2ClientConfiguration {
        var configuration = HTTP2ClientConfiguration()
        configuration.maximumResponseBodySize = 8 << 20
        return configuration
    }
}

extension HTTP2ServerLimits {
    /// Request bodies up to 8 MiB (see `HTTP2ClientConfiguration.largeBodies`).
    static var largeBodies: HTTP2ServerLimits {
        var limits = HTTP2ServerLimits()
        limits.maximumRequestBodySize = 8 << 20
        return limits
    }
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

/// Starts the program on a port from `freePort()` and returns once that process itself has a listening socket
/// on the port, read from `/proc` (not just any listener answering there: a server that failed to bind would
/// otherwise be mistaken for whatever else holds the port). If the process exits first, say because another
/// program took the port in between, it tries again on another port, up to five times.
func startListeningProcess(_ path: String, _ arguments: (Int) -> [String]) async throws -> (process: ExternalProcess, port: Int) {
    for _ in 0..<5 {
        let port = try freePort()
        let server = try ExternalProcess(path, arguments(port))
        for _ in 0..<400 where server.process.isRunning {
            if processListens(pid: server.process.processIdentifier, port: port) { return (server, port) }
            try await Task.sleep(for: .milliseconds(25))
        }
        server.stop()
    }
    throw HTTP2Error(.connectFailed, "\(path) did not start listening on any of five ports")
}

/// Whether one of process `pid`'s open sockets listens on TCP 127.0.0.1:`port` or 0.0.0.0:`port`, the addresses the
/// tests connect to, from `/proc/net/tcp` (state `0A` is LISTEN) and the socket inodes in `/proc/<pid>/fd`. A
/// listener on `[::]` alone does not count: nghttpd that finds the IPv4 port taken keeps running on IPv6 only.
func processListens(pid: Int32, port: Int) -> Bool {
    let hexPort = ":" + String(format: "%04X", port)
    var listening = Set<Substring>()
    if let text = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) {
        for line in text.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 9, fields[3] == "0A" else { continue }
            if fields[1] == "0100007F" + hexPort || fields[1] == "00000000" + hexPort { listening.insert(fields[9]) }
        }
    }
    guard !listening.isEmpty, let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return false }
    return fds.contains { fd in
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"),
              target.hasPrefix("socket:["), target.hasSuffix("]") else { return false }
        return listening.contains(target.dropFirst("socket:[".count).dropLast())
    }
}

/// A hostile HTTP/2 server written with raw frames (RFC 9113 §4.1), for responses nghttp2 would never build:
/// it sends an empty SETTINGS, acknowledges the client's, and answers every request HEADERS with `respond`'s
/// bytes. One connection at a time, blocking I/O on its own thread.
final class RawHTTP2Peer: @unchecked Sendable {
    let port: Int
    private let listenFD: Int32
    private let stopped = Atomic<Bool>(false)
    private let finished = Gate()

    init(respond: @escaping @Sendable (Int32) -> [UInt8]) throws {
        // Blocking: accept and recv wait on this peer's own thread.
        let (fd, port) = try listenSocket(host: "127.0.0.1", port: 0)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        self.listenFD = fd
        self.port = port
        let thread = Thread { [self] in
            while !stopped.load(ordering: .relaxed) {
                let connection = accept(fd, nil, nil)
                if connection < 0 { break }
                serve(connection, respond)
                close(connection)
            }
            finished.open()
        }
        thread.start()
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(listenFD, Int32(SHUT_RDWR))
        close(listenFD)
    }

    private func serve(_ fd: Int32, _ respond: (Int32) -> [UInt8]) {
        func read(_ count: Int) -> [UInt8]? {
            var bytes = [UInt8](repeating: 0, count: count)
            var got = 0
            while got < count {
                let n = bytes.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, count - got, 0) }
                if n <= 0 { return nil }
                got += n
            }
            return bytes
        }
        func write(_ bytes: [UInt8]) -> Bool {
            var sent = 0
            while sent < bytes.count {
                let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { return false }
                sent += n
            }
            return true
        }
        guard read(24) != nil, write(Self.frame(type: 4, flags: 0, stream: 0, [])) else { return }
        while let header = read(9) {
            let length = Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
            guard let _ = read(length) else { return }
            let type = header[3], flags = header[4]
            let stream = Int32(header[5] & 0x7f) << 24 | Int32(header[6]) << 16 | Int32(header[7]) << 8 | Int32(header[8])
            if type == 4 && flags & 1 == 0 {
                guard write(Self.frame(type: 4, flags: 1, stream: 0, [])) else { return }
            } else if type == 1 {
                guard write(respond(stream)) else { return }
            }
        }
    }

    static func frame(type: UInt8, flags: UInt8, stream: Int32, _ payload: [UInt8]) -> [UInt8] {
        let n = payload.count
        return [UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff), type, flags,
                UInt8(stream >> 24 & 0x7f), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff)] + payload
    }

    /// `:status 200`, one 4,000-byte field added to the HPACK dynamic table (RFC 7541 §6.2.1), then one-byte
    /// references to it (index 62, §6.1) filling a HEADERS frame and `continuations` CONTINUATION frames of
    /// 16,384 bytes: about 36 references per KB on the wire, 4 KB each once decoded.
    static func hpackBomb(streamID: Int32, continuations: Int) -> [UInt8] {
        var block: [UInt8] = [0x88, 0x40, 0x01, UInt8(ascii: "x"), 0x7f, 0xa1, 0x1e] + [UInt8](repeating: 0x61, count: 4000)
        let frameSize = 16_384
        block += [UInt8](repeating: 0xbe, count: frameSize * (continuations + 1) - block.count)
        var bytes: [UInt8] = []
        for index in 0...continuations {
            let chunk = Array(block[(index * frameSize)..<((index + 1) * frameSize)])
            let last: UInt8 = index == continuations ? 0x4 : 0  // END_HEADERS
            bytes += index == 0 ? frame(type: 1, flags: 0x1 | last, stream: streamID, chunk)  // END_STREAM
                                : frame(type: 9, flags: last, stream: streamID, chunk)
        }
        return bytes
    }
}

/// Runs `pushizo-bench fetch URL` (the HTTP/2 client with its default bounds) as a child process and returns
/// its one-line outcome and its peak RSS in bytes (VmHWM from /proc/<pid>/status, read while it waits on stdin).
enum BenchFetch {
    static var executable: String {
        if let worker = ProcessInfo.processInfo.environment["PUSHIZO_TEST_EXECUTABLE"] {
            return URL(fileURLWithPath: worker).deletingLastPathComponent().appendingPathComponent("pushizo-bench").path
        }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/pushizo-bench").path
    }

    static func run(_ url: String, _ extra: [String] = []) async throws -> (outcome: String, peakBytes: Int) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["fetch", url] + extra
        let output = Pipe(), input = Pipe()
        process.standardOutput = output
        process.standardInput = input
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Done once VmHWM is read: SIGKILL, never a blocking wait here (this runs on the cooperative pool) nor
        // reliance on stdin's EOF (another child spawned meanwhile may hold a copy of the pipe's write end).
        defer {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            try? input.fileHandleForWriting.close()
        }
        let line = try await onThread { () -> String in
            var bytes: [UInt8] = []
            while !bytes.contains(UInt8(ascii: "\n")) {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                bytes += chunk
            }
            return String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let status = try String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)
        guard let field = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
              let kilobytes = Int(field.split(separator: " ", omittingEmptySubsequences: true)[1]) else {
            throw HTTP2Error(.setupFailed, "no VmHWM for pushizo-bench (exited early? output: \(line))")
        }
        return (line, kilobytes * 1024)
    }

    /// Runs blocking work on its own thread (never on the cooperative pool).
    private static func onThread<T: Sendable>(_ work: @escaping @Sendable () -> T) async throws -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: work()) }.start()
        }
    }
}


/// `body`'s answer, computed on `loop`'s thread (where the client's and the server's state live).
func onLoop<T: Sendable>(_ loop: HTTP2EventLoop, _ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        _ = loop.execute { continuation.resume(returning: body()) }
    }
}

extension RawHTTP2Peer {
    /// A cleartext connection to 127.0.0.1:`port` that sends the client preface, an empty SETTINGS and a POST's
    /// HEADERS (static-table `:method POST`, `:scheme http`, `:path /`; `:authority x`) on stream 1, then
    /// `bodyBytes` bytes of its body and never its end. Blocking: call it on a socket thread.
    static func unfinishedPost(port: Int, bodyBytes: Int) throws -> Int32 {
        let fd = try RawTCP.connect(port: port)
        var bytes = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + frame(type: 4, flags: 0, stream: 0, [])
            + frame(type: 1, flags: 0x4, stream: 1, [0x83, 0x86, 0x84, 0x01, 0x01, UInt8(ascii: "x")])
        if bodyBytes > 0 { bytes += frame(type: 0, flags: 0, stream: 1, [UInt8](repeating: 1, count: bodyBytes)) }
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
        return fd
    }
}
