import Dispatch
import Foundation

/// Routes SIGTERM and SIGINT to a handler through Dispatch signal sources (the default disposition is set to
/// ignore first, or the process would die before the source sees the signal), and ignores SIGPIPE so a write
/// to a socket the peer closed returns EPIPE instead of killing the daemon.
/// `@unchecked Sendable`: `sources` is written once in `init` and only read again in `deinit`; the sources
/// themselves run their handlers on their own serial queue.
public final class SignalHandling: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]

    /// - Parameter onStop: called on the first SIGTERM or SIGINT; a second one exits at once with status 130
    ///   (an operator's "I really mean it").
    public init(onStop: @escaping @Sendable (Int32) -> Void) {
        signal(SIGPIPE, SIG_IGN)
        let queue = DispatchQueue(label: "pushizo.signals")
        let received = SignalCounter()
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler {
                if received.increment() > 1 {
                    FileHandle.standardError.write(Data("second signal: exiting now\n".utf8))
                    exit(130)
                }
                onStop(number)
            }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    deinit {
        for source in sources { source.cancel() }
    }
}

import Synchronization

private final class SignalCounter: Sendable {
    private let count = Atomic<Int>(0)
    func increment() -> Int { count.add(1, ordering: .relaxed).newValue }
}

/// systemd's `sd_notify` protocol (sd_notify(3)) without libsystemd: a datagram to `$NOTIFY_SOCKET`.
/// Does nothing when the variable is unset (not started by systemd with `Type=notify`).
public enum SystemdNotifier {
    /// Sends `state`, e.g. `"READY=1"`, `"STOPPING=1"`, `"STATUS=draining"`. Errors are ignored: a missing
    /// notification must never stop the daemon.
    public static func notify(_ state: String) {
        guard var path = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !path.isEmpty else { return }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let abstract = path.hasPrefix("@")
        if abstract { path.removeFirst() }
        var bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count + (abstract ? 1 : 0) < capacity else { return }
        if abstract { bytes.insert(0, at: 0) }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
        let message = Array(state.utf8)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                message.withUnsafeBytes { buffer in
                    sendto(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL), socketAddress, length)
                }
            }
        }
    }
}
