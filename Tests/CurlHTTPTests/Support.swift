import Foundation
import HTTP2
import Synchronization

/// A TCP listener on 127.0.0.1 that never accepts on its
/// own: afterwards the test asks whether any connection reached its queue.
struct LoopbackListener {
    let fd: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.fd = fd
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// True when no connection is waiting to be accepted (none was made: the refusals come before connect).
    func acceptedNothing() -> Bool {
        let client = accept(fd, nil, nil)
        if client >= 0 { Glibc.close(client); return false }
        return errno == EAGAIN || errno == EWOULDBLOCK
    }

    func close() { Glibc.close(fd) }
}

/// The requests a test receiver got, in arrival order.
final class RequestLog: Sendable {
    private let requests = Mutex<[HTTP2ServerRequest]>([])

    func append(_ request: HTTP2ServerRequest) { requests.withLock { $0.append(request) } }

    func withLock<T>(_ body: ([HTTP2ServerRequest]) -> T) -> T { requests.withLock { body($0) } }
}
