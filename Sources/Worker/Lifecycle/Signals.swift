import Foundation
internal import CPushizoGlibcShims
internal import CSystemd

/// A signal as it arrived: its number and, when a process sent it (`kill(2)`, `sigqueue(3)`), the sender's
/// process ID, so a log line can say who asked (systemd, a log rotator, an operator's shell).
public struct ReceivedSignal: Sendable, Equatable {
    public var number: Int32
    /// `nil` for a signal the kernel raised itself (SIGXCPU, SIGXFSZ).
    public var senderPID: Int32?

    public init(number: Int32, senderPID: Int32?) {
        self.number = number
        self.senderPID = senderPID
    }

    /// `SIGTERM`, `SIGRTMIN+3` (``SignalPolicy/name(of:)``).
    public var name: String { SignalPolicy.name(of: number) }

    /// `signal` and, when known, `sender_pid`: the fields of every log line about it.
    public var logFields: [String: String] {
        var fields = ["signal": name]
        if let senderPID { fields["sender_pid"] = "\(senderPID)" }
        return fields
    }
}

/// Carries out ``SignalPolicy`` for a long-running command. Every handled signal gets one process-wide handler
/// (installed by ``prepare()``, written in C: `pz_signals_forward_to_pipe`) that only writes the signal's number
/// and sender to a pipe; a thread of its own, `pushizo-signals`, reads the pipe and acts: the first stop signal
/// calls `onStop`, later ones and the ignored signals are logged. So no handled signal can take its default
/// action and end the process, whichever thread the kernel picks to take it, and nothing runs on Swift's
/// cooperative pool. SIGPIPE is ignored outright, so a write to a socket the peer closed returns `EPIPE`
/// instead of killing the daemon.
///
/// The handled signals but SIGPROF (``blockedSignals``) are also blocked in every thread but the signal
/// thread (``prepare()`` blocks them in the main thread before any other thread starts, and threads inherit the
/// mask), so that a signal does not interrupt another thread's system calls. The main thread is an exception
/// Swift's runtime makes: once the async `main` waits, libdispatch parks that thread in `sigsuspend(2)` with an
/// empty mask, where it takes any signal; the handler makes that harmless.
///
/// The thread reads for the rest of the process's life; create one `SignalHandling` per process.
public final class SignalHandling: Sendable {
    /// The read end of the handler's pipe: created, and the handler installed, on first use.
    private static let pipeReadEnd: Int32 = {
        signal(SIGPIPE, SIG_IGN)
        let signals: [CInt] = SignalPolicy.handledSignals
        return signals.withUnsafeBufferPointer { pz_signals_forward_to_pipe($0.baseAddress, CInt($0.count)) }
    }()

    /// Installs the handler for every signal of ``SignalPolicy/handledSignals`` and blocks ``blockedSignals``
    /// in the calling thread, whose mask threads started from it afterwards inherit. Call it first thing in
    /// `main`, before any other thread is started; a signal that arrives before the signal thread starts waits
    /// in the pipe.
    public static func prepare() {
        _ = pipeReadEnd
        var set = blockedSet()
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// The handled signals every thread but the signal thread blocks: all but SIGPROF, which Swift's crash
    /// handler sends to each thread (when SIGUSR1 and SIGUSR2 are blocked, as here and in libdispatch's
    /// threads) to pause it for the crash report's backtrace of every thread (the runtime's
    /// CrashHandlerLinux.cpp); libdispatch leaves it unblocked in its own threads for the same kind of reason.
    static var blockedSignals: [Int32] { SignalPolicy.handledSignals.filter { $0 != SIGPROF } }

    private static func blockedSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for number in blockedSignals { sigaddset(&set, number) }
        return set
    }

    /// Starts the signal thread (and calls ``prepare()`` if `main` did not).
    /// - Parameters:
    ///   - logger: for the lines about ignored signals and stop signals received while stopping.
    ///   - onStop: called once, on the signal thread, for the first of ``SignalPolicy/stopSignals``.
    public init(logger: Logger, onStop: @escaping @Sendable (ReceivedSignal) -> Void) {
        Self.prepare()
        let readEnd = Self.pipeReadEnd
        let thread = Thread {
            // The kernel's thread name (top -H, /proc/PID/task/TID/comm), set by the thread itself.
            _ = pz_set_current_thread_name("pushizo-signals")
            // This thread takes the handled signals, so one thread always can even if every other blocks them.
            var set = Self.blockedSet()
            pthread_sigmask(SIG_UNBLOCK, &set, nil)
            var stopping = false
            while let received = Self.next(from: readEnd) {
                switch SignalPolicy.action(for: received.number) {
                case .stop?:
                    if stopping {
                        logger.notice("signal received while stopping; the stop goes on", received.logFields)
                    } else {
                        stopping = true
                        onStop(received)
                    }
                case .ignore?:
                    logger.notice("signal ignored", received.logFields.merging(["reason": SignalPolicy.reasonIgnored(received.number)]) { old, _ in old })
                case nil:
                    continue
                }
            }
            logger.error("signal handling ended: the signal pipe cannot be read")
        }
        thread.start()
    }

    /// The next record from the handler's pipe (blocking); `nil` when the pipe cannot be read.
    private static func next(from readEnd: Int32) -> ReceivedSignal? {
        guard readEnd >= 0 else { return nil }
        var record = pz_signal_record()
        let size = MemoryLayout<pz_signal_record>.size
        var filled = 0
        while filled < size {
            let count = withUnsafeMutableBytes(of: &record) { buffer in
                read(readEnd, buffer.baseAddress! + filled, size - filled)
            }
            if count > 0 {
                filled += count
            } else if count < 0, errno == EINTR {
                continue
            } else {
                return nil
            }
        }
        // si_code <= 0 (SI_USER, SI_QUEUE, SI_TKILL): a process sent it, and si_pid names that process.
        return ReceivedSignal(number: record.number, senderPID: record.code <= 0 ? record.sender_pid : nil)
    }
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
