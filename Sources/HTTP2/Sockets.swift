import Foundation
internal import Glibc

/// A resolved TCP address (IPv4 or IPv6) in a `sockaddr_storage`.
struct SocketAddress: @unchecked Sendable {
    var storage = sockaddr_storage()
    var length: socklen_t = 0

    var family: Int32 { Int32(storage.ss_family) }

    /// Parses an IP literal without touching DNS; nil for a host name.
    static func literal(_ host: String, port: Int) -> SocketAddress? {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1, let address = withUnsafeBytes(of: v4, { IPAddress(bytes: Array($0)) }) {
            return SocketAddress(address, port: port)
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1, let address = withUnsafeBytes(of: v6, { IPAddress(bytes: Array($0)) }) {
            return SocketAddress(address, port: port)
        }
        return nil
    }

    /// Resolves `host` with `getaddrinfo` (blocking: call off the loop thread). Returns addresses in the
    /// resolver's order, or an error text.
    static func resolve(_ host: String, port: Int) -> Result<[SocketAddress], HTTP2Error> {
        if let literal = literal(host, port: port) { return .success([literal]) }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &result)
        guard rc == 0 else {
            return .failure(HTTP2Error(.connectFailed, "cannot resolve \(host): \(String(cString: gai_strerror(rc)))", isSafeToRetry: true))
        }
        defer { freeaddrinfo(result) }
        var addresses: [SocketAddress] = []
        var cursor = result
        while let info = cursor {
            if let sa = info.pointee.ai_addr, info.pointee.ai_addrlen <= socklen_t(MemoryLayout<sockaddr_storage>.size) {
                var address = SocketAddress()
                withUnsafeMutableBytes(of: &address.storage) { raw in
                    raw.copyMemory(from: UnsafeRawBufferPointer(start: sa, count: Int(info.pointee.ai_addrlen)))
                }
                address.length = info.pointee.ai_addrlen
                addresses.append(address)
            }
            cursor = info.pointee.ai_next
        }
        if addresses.isEmpty {
            return .failure(HTTP2Error(.connectFailed, "\(host) has no addresses", isSafeToRetry: true))
        }
        return .success(addresses)
    }
}

/// Resolves `host` for a connection and delivers the checked addresses on the loop thread; call it on the loop
/// thread.
///
/// The host is parsed first (``EgressHost``): an invalid spelling fails with `.forbiddenAddress`, an address
/// literal in any spelling is checked against `policy` at once. A name is looked up on `resolver` (a bounded
/// pool, never a thread per lookup) for `tenant` (the share it counts against besides its registrable domain's,
/// ``HostResolverLimits``), and every address of the answer is checked (``checkResolved``) before the result
/// reaches the loop; the caller connects to exactly these addresses. A lookup that takes longer than `timeout`
/// fails with `.connectFailed` (safe to retry): one still waiting for the resolver is dropped from its queue, one
/// running has its late answer dropped.
/// - Returns: the lookup's ticket while it may still wait in the resolver (for ``HostResolver/share(_:with:)``);
///   nil when the answer came at once (a literal, a refusal).
@discardableResult
func resolveOffLoop(_ host: String, port: Int, policy: EgressPolicy = .unrestricted, loop: HTTP2EventLoop,
                    resolver: HostResolver = .shared, tenant: String? = nil, timeout: Duration = .seconds(10),
                    _ completion: @escaping @Sendable (Result<[SocketAddress], HTTP2Error>) -> Void) -> HostResolver.Ticket? {
    let parsed: EgressHost
    do {
        parsed = try policy.check(host: host)
    } catch {
        completion(.failure(HTTP2Error(.forbiddenAddress, "refused \(host): \(error.message)")))
        return nil
    }
    let name: String
    switch parsed {
    case .address(let address):
        completion(.success([SocketAddress(address, port: port)]))
        return nil
    case .name(let text):
        name = text
    }
    // Loop-confined: the answer and the timer both run on the loop thread; the first one wins.
    final class Pending: @unchecked Sendable {
        var completion: ((Result<[SocketAddress], HTTP2Error>) -> Void)?
        var timer: LoopTimerID?
        var ticket: HostResolver.Ticket?
    }
    let pending = Pending()
    pending.completion = completion
    let core = loop.core
    pending.timer = core.schedule(after: timeout) {
        pending.timer = nil
        if let ticket = pending.ticket { resolver.cancel(ticket) }
        let completion = pending.completion
        pending.completion = nil
        completion?(.failure(HTTP2Error(.connectFailed, "cannot resolve \(host): no answer within \(timeout)", isSafeToRetry: true)))
    }
    pending.ticket = resolver.resolve(name, port: port, tenant: tenant) { result in
        let checked = result.flatMap { checkResolved(host, $0, policy: policy) }
        let delivered = loop.execute {
            core.cancelTimer(pending.timer)
            let completion = pending.completion
            pending.completion = nil
            completion?(checked)
        }
        // A stopped loop never runs it; its stop hooks fail whatever was waiting.
        _ = delivered
    }
    return pending.ticket
}

/// Opens a non-blocking TCP socket and starts connecting. Returns the fd (connect may still be in progress).
func startConnect(_ address: SocketAddress) -> Result<Int32, HTTP2Error> {
    let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else {
        return .failure(HTTP2Error(.connectFailed, "socket failed: \(errnoText())", isSafeToRetry: true))
    }
    setNoDelay(fd)
    var storage = address.storage
    let rc = withUnsafePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, address.length) }
    }
    if rc != 0 && errno != EINPROGRESS {
        let text = errnoText()
        close(fd)
        return .failure(HTTP2Error(.connectFailed, "connect failed: \(text)", isSafeToRetry: true))
    }
    return .success(fd)
}

/// HTTP/2 multiplexes small frames; Nagle's algorithm would delay them.
func setNoDelay(_ fd: Int32) {
    var one: Int32 = 1
    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
}

/// Binds and listens (non-blocking, SO_REUSEADDR); returns the fd and the bound port.
func listenSocket(host: String, port: Int) throws -> (fd: Int32, port: Int) {
    guard let address = SocketAddress.literal(host, port: port) else {
        throw HTTP2Error(.setupFailed, "listen address must be an IP literal, got \(host)")
    }
    let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw HTTP2Error(.setupFailed, "socket failed: \(errnoText())") }
    var one: Int32 = 1
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    var storage = address.storage
    let bound = withUnsafePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, address.length) }
    }
    guard bound == 0, listen(fd, 1024) == 0 else {
        let text = errnoText()
        close(fd)
        throw HTTP2Error(.setupFailed, "cannot listen on \(host):\(port): \(text)")
    }
    var actual = sockaddr_storage()
    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    _ = withUnsafeMutablePointer(to: &actual) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    let boundPort: UInt16 = withUnsafeBytes(of: &actual) { raw in
        // sin_port and sin6_port share the offset after the family.
        UInt16(bigEndian: raw.load(fromByteOffset: 2, as: UInt16.self))
    }
    return (fd, Int(boundPort))
}
