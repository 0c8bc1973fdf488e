import Postgres

/// What `run` does when a connection to PostgreSQL fails before the worker has started (before `READY=1`): a
/// value fed each failed attempt, answering with an action, its clock passed in (no I/O).
///
/// - An error an operator must fix (``PostgresError/needsReconfiguration``: a bad password, a role that may not
///   log in, no such database, a missing right, a connection string libpq cannot parse) ends the start:
///   ``Action/giveUp(_:)``, exit 78 (`EX_CONFIG`), which the units do not restart (`RestartPreventExitStatus=`).
/// - Anything else (connection refused, a timeout, the server starting up `57P03` or out of slots `53300`, a
///   standby) may pass by itself: ``Action/retry(status:log:)``, with a `STATUS=` line for systemd on every
///   attempt and a log line on the first and then at most once per ``logInterval``.
///
/// Only the start is judged so. Once the worker has started, the same errors are waited out like any other: a
/// password changed on the server while a fleet runs is most often a rotation in progress (the new password is
/// being rolled out to the hosts' environment files), and a fleet that exited on it would stop delivering
/// everywhere at once, where one that keeps retrying picks up as soon as its connections are allowed again.
public struct DatabaseStartWait: Sendable {
    public enum Action {
        /// Stop starting: the error, as the problem of the connection string's key.
        case giveUp(ConfigurationError)
        /// Try again. `status` is the `STATUS=` line to send systemd now; `log` says whether to log this attempt.
        case retry(status: String, log: Bool)
    }

    /// Least time between two log lines about the same wait.
    public static let logInterval = Duration.seconds(30)
    /// Longest reason a `STATUS=` line carries (`systemctl status` shows one line).
    static let statusReasonLimit = 300

    /// The connection string's key the errors are blamed on.
    public let key: ConfigurationKey
    /// Failed attempts so far.
    public private(set) var failures = 0
    /// Failed attempts since the last log line, that one included.
    public private(set) var failuresSinceLog = 0
    private var loggedAt: ContinuousClock.Instant?

    public init(key: ConfigurationKey) {
        self.key = key
    }

    /// Records a failed attempt at `now`.
    public mutating func failed(_ error: any Error, now: ContinuousClock.Instant) -> Action {
        if let refusal = ConfigurationError(refusal: error, key: key) { return .giveUp(refusal) }
        failures += 1
        let log = loggedAt.map { now - $0 >= Self.logInterval } ?? true
        if log {
            loggedAt = now
            failuresSinceLog = 1
        } else {
            failuresSinceLog += 1
        }
        return .retry(status: "STATUS=waiting for PostgreSQL: " + Self.reason(error), log: log)
    }

    /// The error as one line (a newline would start another `sd_notify` assignment), cut to ``statusReasonLimit``.
    static func reason(_ error: any Error) -> String {
        let text = ((error as? PostgresError)?.message ?? "\(error)").split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
        return text.count > statusReasonLimit ? String(text.prefix(statusReasonLimit - 3)) + "..." : text
    }
}
