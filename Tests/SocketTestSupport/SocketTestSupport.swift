import Foundation
import Glibc
import Synchronization

// Plain sockets for the test targets that start servers or play hostile clients (HTTP2Tests, WorkerTests): ports
// that no other test can be given meanwhile, and TCP connections that send nothing.

/// The larger stretch of unprivileged ports (1024-65535) below or above the kernel's ephemeral range; 10000-32767
/// when the range cannot be read (Linux's default range starts at 32768).
public func portsOutsideEphemeralRange() -> Range<Int> {
    let bounds = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))?
        .split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).compactMap { Int($0) } ?? []
    guard bounds.count == 2, bounds[0] <= bounds[1] else { return 10_000..<32_768 }
    let below = 1_024..<max(1_024, bounds[0])
    let above = min(65_536, bounds[1] + 1)..<65_536
    return below.count >= above.count ? below : above
}

/// Ports this test process has handed out, so two tests never get the same one.
private let handedOutPorts = Mutex<Set<Int>>([])

/// A TCP port that was free on 127.0.0.1 a moment ago, released at once for the caller (or a child process) to
/// bind. It is taken outside the kernel's ephemeral range (``portsOutsideEphemeralRange()``): a port the kernel
/// chose would be free for its next `bind` to port 0 or outgoing connection by any of the many processes these
/// tests run, until the caller binds it. Never the same port twice in one test process.
/// - Throws: `POSIXError(.EADDRNOTAVAIL)` after 100 tries.
public func freePort() throws -> Int {
    let candidates = portsOutsideEphemeralRange()
    for _ in 0..<100 {
        let port = Int.random(in: candidates)
        guard handedOutPorts.withLock({ $0.insert(port).inserted }) else { continue }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = RawTCP.loopback(port: port)
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc == 0 { return port }
    }
    throw POSIXError(.EADDRNOTAVAIL)
}

/// Blocking TCP connections to 127.0.0.1, for tests that play a client sending nothing at all.
public enum RawTCP {
    /// A blocking TCP connection to 127.0.0.1:`port`.
    /// - Throws: `POSIXError` with the failing call's errno.
    public static func connect(port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        var address = loopback(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        return fd
    }

    /// Whether the peer closed `fd` (a read returns 0 or fails) within `seconds`; what it sent before is
    /// discarded.
    public static func readsEndOfStream(_ fd: Int32, within seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while Date() < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) >= 0 else { return false }
            if poller.revents == 0 { continue }
            if recv(fd, &buffer, buffer.count, 0) <= 0 { return true }
        }
        return false
    }

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }
}

/// Runs blocking work (sockets, processes, database calls) on a thread of its own, never on Swift's cooperative
/// pool.
public func onSocketThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}

/// For `defer` blocks, which cannot await: runs `work` on a thread of its own and waits for it (the calling
/// thread blocks, so only where nothing else could run instead).
public func onSocketThreadSync<T: Sendable>(_ work: @escaping @Sendable () throws -> T) throws -> T {
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var result: Result<T, any Error>!
    Thread {
        result = Result { try work() }
        done.signal()
    }.start()
    done.wait()
    return try result.get()
}
