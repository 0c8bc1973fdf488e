import Dispatch
import Foundation
internal import CSystemd

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

/// systemd's notification protocol through libsystemd (sd_notify(3), sd_watchdog_enabled(3)): datagrams to
/// `$NOTIFY_SOCKET`. Does nothing when the variable is unset (not started by systemd with `Type=notify`).
public enum SystemdNotifier {
    /// Sends `state`, e.g. `"READY=1"`, `"STOPPING=1"`, `"STATUS=draining"`, `"WATCHDOG=1"`. Errors are
    /// ignored: a missing notification must never stop the daemon. May block briefly if the receiver's queue
    /// is full (a datagram socket), so callers keep it off Swift's cooperative threads where they can.
    public static func notify(_ state: String) {
        _ = sd_notify(0, state)
    }

    /// Whether `$NOTIFY_SOCKET` is set (the process runs under systemd with `Type=notify`, or a test's socket).
    public static var isEnabled: Bool {
        !(ProcessInfo.processInfo.environment["NOTIFY_SOCKET"] ?? "").isEmpty
    }

    /// systemd's watchdog interval (`WatchdogSec=`, passed as `$WATCHDOG_USEC` and, when set, `$WATCHDOG_PID`
    /// naming this process), or `nil` when the watchdog is off for this process.
    public static func watchdogInterval() -> Duration? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0, microseconds < UInt64(Int64.max) else {
            return nil
        }
        return .microseconds(Int64(microseconds))
    }
}
