import Foundation
import Synchronization

/// Receives LISTEN/NOTIFY notifications on its own connection and dedicated thread.
///
/// The thread connects, `LISTEN`s on every channel, yields ``Event/reconnected``, then yields each
/// notification as it arrives. When the connection fails or breaks it reconnects after the jittered delay
/// of a ``PostgresReconnectBackoff`` (0.1 s doubling to 5 s; 1 s doubling to 60 s while the server has no
/// connection slot left) and yields `.reconnected` again: notifications sent while it was away
/// are lost (PostgreSQL does not queue them for absent sessions, docs `NOTIFY`), so the consumer should
/// poll after every `.reconnected`.
public final class PostgresListener: Sendable {
    /// What the listener reports.
    public enum Event: Sendable, Equatable {
        /// A notification on one of the channels.
        case notification(PostgresNotification)
        /// A connection was (re)established and every channel is listened to again.
        case reconnected
    }

    private let stream: AsyncStream<Event>
    private let control: PostgresListenerControl

    /// Starts the listener thread at once.
    /// - Parameters:
    ///   - connectionString: libpq URL or `key=value` string (see ``PostgresConnection``).
    ///   - channels: channel names; quoted with `PQescapeIdentifier`, so case and punctuation are kept.
    ///   - applicationName: `application_name` of the listening session.
    public init(connectionString: String, channels: [String], applicationName: String = "pushizo-worker-listen") {
        // Newest events are kept if the consumer falls far behind: a later `.reconnected` or
        // notification is worth more than an old one (notifications are only hints).
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(10_000))
        self.stream = stream
        let control = PostgresListenerControl(continuation: continuation)
        self.control = control
        let thread = Thread {
            control.run(connectionString: connectionString, channels: channels, applicationName: applicationName)
        }
        thread.name = "pushizo-postgres-listen"
        thread.start()
    }

    deinit { control.stop() }

    /// The event stream. Single consumer: every call returns the same stream. It finishes after
    /// ``shutdown()``.
    public func events() -> AsyncStream<Event> { stream }

    /// The last connection or LISTEN error (passwords redacted), nil after a successful (re)connect.
    /// For logging; the listener keeps retrying by itself.
    public var lastError: PostgresError? { control.lastError.withLock { $0 } }

    /// Stops the thread promptly (it is woken through a pipe, not left to time out) and finishes the
    /// event stream. Idempotent; does not wait for the thread.
    public func shutdown() { control.stop() }
}

/// State shared between a ``PostgresListener`` and its thread. Sendable: the stop flag is atomic, the
/// error is behind a mutex, the continuation and wake pipe are thread-safe.
final class PostgresListenerControl: Sendable {
    let continuation: AsyncStream<PostgresListener.Event>.Continuation
    let stopped = Atomic<Bool>(false)
    let wake = PostgresSocketWait.WakePipe()
    let lastError = Mutex<PostgresError?>(nil)

    init(continuation: AsyncStream<PostgresListener.Event>.Continuation) {
        self.continuation = continuation
    }

    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wake.wake()
        continuation.finish()
    }

    private var isStopped: Bool { stopped.load(ordering: .acquiring) }

    func run(connectionString: String, channels: [String], applicationName: String) {
        var backoff = PostgresReconnectBackoff()
        while !isStopped {
            do {
                let connection = try PostgresConnection(
                    connectionString: connectionString, applicationName: applicationName, wakeFD: wake.readFD)
                defer { connection.close() }
                for channel in channels { try connection.listen(channel) }
                backoff.succeeded()
                lastError.withLock { $0 = nil }
                continuation.yield(.reconnected)
                while !isStopped {
                    // Nil means woken for shutdown; the timeout only bounds each wait.
                    guard let notifications = try connection.waitForNotifications(timeout: .seconds(60), wakeFD: wake.readFD)
                    else { break }
                    for notification in notifications { continuation.yield(.notification(notification)) }
                }
            } catch {
                if isStopped { break }
                lastError.withLock {
                    $0 = error as? PostgresError ?? PostgresError(code: .connectionLost, message: "\(error)")
                }
                let delay = backoff.failed(PostgresReconnectBackoff.cause(of: error), jitter: Double.random(in: 0...1))
                if PostgresSocketWait.wait(fd: -1, events: 0, wakeFD: wake.readFD, timeout: delay) == .woken { break }
            }
        }
        continuation.finish()
    }
}
