import Foundation

/// What the long-running commands (`run`, `emulator`) do with each signal whose default action would end the
/// process (signal(7): action "Term" or "Core"). Nothing here touches a signal; ``SignalHandling`` carries it
/// out. The reasons, signal by signal, are in docs/operations.md ("Signals").
public enum SignalPolicy {
    public enum Action: Sendable, Equatable {
        /// The graceful stop: stop claiming, finish in-flight sends, write their events, exit.
        case stop
        /// A log line, nothing else.
        case ignore
    }

    /// Signals that ask the process to end: SIGTERM (systemd's `KillSignal=`, `kill`), SIGINT (Ctrl-C), SIGQUIT
    /// (Ctrl-\), SIGXCPU (past `RLIMIT_CPU`'s soft limit; the hard limit's SIGKILL follows) and SIGPWR (the
    /// power is failing). Each gets the graceful stop; so does a second one, which changes nothing (the stop is
    /// already bounded by `PUSHIZO_SHUTDOWN_TIMEOUT`; SIGKILL ends the process at once).
    public static let stopSignals: [Int32] = [SIGTERM, SIGINT, SIGQUIT, SIGXCPU, SIGPWR]

    /// Signals with nothing to do here, logged and ignored: SIGHUP (a reload or a log rotation: logs go to
    /// stderr and settings are read at start, so nothing can be reopened or reloaded), SIGUSR1, SIGUSR2, the
    /// timer signals SIGALRM, SIGVTALRM and SIGPROF (the worker arms no such timer), SIGIO (no descriptor
    /// asks for it), SIGSTKFLT (unused on Linux), SIGXFSZ (past `RLIMIT_FSIZE`: the write fails with `EFBIG`
    /// instead, and a log line that cannot be written is dropped), and the real-time signals SIGRTMIN ...
    /// SIGRTMAX.
    public static let ignoredSignals: [Int32] =
        [SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGSTKFLT, SIGXFSZ] + realTimeSignals

    /// SIGRTMIN ... SIGRTMAX as glibc reports them (34 ... 64 on Linux; glibc keeps the two below for its
    /// threads and never lets a process block them).
    public static var realTimeSignals: [Int32] { Array(__libc_current_sigrtmin()...__libc_current_sigrtmax()) }

    /// Every signal ``SignalHandling`` takes over.
    public static var handledSignals: [Int32] { stopSignals + ignoredSignals }

    /// What to do with `signal`; `nil` for one left alone: SIGKILL and SIGSTOP (no process can catch them),
    /// SIGPIPE (ignored outright, so a write to a closed socket returns `EPIPE`), SIGABRT (`abort()`, and the
    /// signal systemd's watchdog kills a stuck worker with, for a core dump), the faults the kernel raises at a
    /// failing instruction (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS: the process cannot go on), and
    /// the signals whose default is to do nothing or to stop the process (SIGCHLD, SIGWINCH, SIGTSTP, ...).
    public static func action(for signal: Int32) -> Action? {
        if stopSignals.contains(signal) { return .stop }
        if ignoredSignals.contains(signal) { return .ignore }
        return nil
    }

    /// Why a signal is ignored, for the log line.
    public static func reasonIgnored(_ signal: Int32) -> String {
        switch signal {
        case SIGHUP:
            "nothing to reopen or reload: logs go to stderr and settings are read at start (restart to apply new ones)"
        case SIGXFSZ:
            "a write past the file size limit fails instead"
        default:
            "not used by pushizo-worker"
        }
    }

    /// The signal's name as kill(1) spells it with the `SIG` prefix: `SIGHUP`, `SIGRTMIN+3`; `signal 99` for
    /// a number outside Linux's.
    public static func name(of signal: Int32) -> String {
        let names: [Int32: String] = [
            SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP",
            SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGUSR1: "SIGUSR1",
            SIGSEGV: "SIGSEGV", SIGUSR2: "SIGUSR2", SIGPIPE: "SIGPIPE", SIGALRM: "SIGALRM", SIGTERM: "SIGTERM",
            SIGSTKFLT: "SIGSTKFLT", SIGCHLD: "SIGCHLD", SIGCONT: "SIGCONT", SIGSTOP: "SIGSTOP", SIGTSTP: "SIGTSTP",
            SIGTTIN: "SIGTTIN", SIGTTOU: "SIGTTOU", SIGURG: "SIGURG", SIGXCPU: "SIGXCPU", SIGXFSZ: "SIGXFSZ",
            SIGVTALRM: "SIGVTALRM", SIGPROF: "SIGPROF", SIGWINCH: "SIGWINCH", SIGIO: "SIGIO", SIGPWR: "SIGPWR",
            SIGSYS: "SIGSYS",
        ]
        if let name = names[signal] { return name }
        let first = __libc_current_sigrtmin(), last = __libc_current_sigrtmax()
        guard (first...last).contains(signal) else { return "signal \(signal)" }
        if signal == first { return "SIGRTMIN" }
        if signal == last { return "SIGRTMAX" }
        return signal - first <= last - signal ? "SIGRTMIN+\(signal - first)" : "SIGRTMAX-\(last - signal)"
    }
}
